//! Everything that speaks SQL: connections and the pool, migrations, the generated schema,
//! the rows, and the queries of each concern (the worker's queue apart from the management
//! reads). No other module builds a query; hand-written statements live in `sql/`.

mod error;
pub use error::DbError;

pub mod alerts;
pub mod audit;
pub mod deliveries;
pub mod destinations;
pub mod endpoint_events;
pub mod endpoints;
pub mod events;
pub mod files;
pub mod history;
pub mod keys;
mod keyset;
pub mod listen;
pub mod migrations;
pub mod models;
pub mod projects;
pub mod queue;
pub mod rate_limits;
pub mod replica;
pub mod schema;
pub mod server_secrets;
pub mod spam;
pub mod statement;
pub mod submissions;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

use crate::config::{DatabaseConfig, Secret};
use crate::postgres_url as tls;

type Manager = AsyncDieselConnectionManager<AsyncPgConnection>;
pub type DbPool = bb8::Pool<Manager>;

/// How long a request waits for a free connection before it is answered with 503.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(5);

/// TCP keepalives on every connection: a peer that vanished without closing (a dead host,
/// a dropped route) is noticed on an idle connection too. The first probe goes out after
/// the network timeout without traffic; with `TCP_USER_TIMEOUT` (Linux) an unanswered
/// probe ends the connection about an interval later, elsewhere after the retries.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_RETRIES: u32 = 3;

/// With several hosts, how long one host's opening may go without an outcome before the
/// next host is tried beside it (as "happy eyeballs" does for addresses): a host whose
/// packets are dropped (a primary cut off in a failover) would otherwise cost every new
/// connection a whole connect timeout before the promoted standby is even asked. A host
/// that answers at all (refused, read-only, an error) hands on at once.
const HOST_STAGGER: Duration = Duration::from_millis(500);

/// The value every connection sets as `application_name`; the event reader also uses it
/// to tell this service's transactions from others in the cluster.
pub const APPLICATION_NAME: &str = "hymical-forms";

/// How every connection of the process is opened and set up.
#[derive(Clone)]
pub struct ConnectionSettings {
    /// One configuration per host of the URL, tried in its order, except that the host
    /// that last opened is tried first ([`ConnectionSettings::connect`]).
    hosts: Arc<[tokio_postgres::Config]>,
    /// The index of the host that last opened a connection, shared by every clone.
    preferred: Arc<AtomicUsize>,
    /// Per host: its last attempt got no answer within the connect timeout (its packets
    /// dropped, say). Such a host is asked last.
    unanswered: Arc<[std::sync::atomic::AtomicBool]>,
    tls: tls::Tls,
    setup: String,
    /// The whole opening of one host (TCP, TLS, start-up, authentication, the read-write
    /// check `target_session_attrs=read-write` asks for, set-up) must fit in this, and each
    /// host has its own: tokio-postgres's own connect timeout covers only the TCP connect,
    /// and a server that accepts and then says nothing would otherwise hold the attempt
    /// (and its place in the pool) for ever, or leave no time for the next host.
    connect_timeout: Duration,
}

impl std::fmt::Debug for ConnectionSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration holds the password.
        f.write_str("ConnectionSettings(<redacted>)")
    }
}

impl ConnectionSettings {
    /// From the database URL and the timeouts of the configuration.
    pub fn new(url: &Secret, database: &DatabaseConfig) -> Result<ConnectionSettings, DbError> {
        Ok(ConnectionSettings::with_timeouts(
            url,
            database.statement_timeout,
            database.idle_in_transaction_timeout,
            database.connect_timeout,
        )?
        .network_timeout(database.network_timeout))
    }

    /// The same settings with another network timeout
    /// (`FORMS_DATABASE_NETWORK_TIMEOUT_SECONDS`): data sent and unacknowledged this long
    /// ends a connection (`TCP_USER_TIMEOUT`), and an idle connection is probed once it has
    /// been silent this long. A slow query is no silence: the server's kernel acknowledges
    /// the statement at once, and the statement timeout bounds the rest.
    pub fn network_timeout(self, timeout: Duration) -> ConnectionSettings {
        self.each_host(|config| {
            config.keepalives_idle(timeout).tcp_user_timeout(timeout);
        })
    }

    /// The same settings with `set` applied to every host's.
    fn each_host(mut self, set: impl Fn(&mut tokio_postgres::Config)) -> ConnectionSettings {
        let mut hosts = self.hosts.to_vec();
        hosts.iter_mut().for_each(set);
        self.hosts = hosts.into();
        self
    }

    pub fn with_timeouts(
        url: &Secret,
        statement_timeout: Duration,
        idle_in_transaction_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<ConnectionSettings, DbError> {
        let target = tls::parse(url.expose()).map_err(|problem| {
            DbError::Connect(diesel::ConnectionError::InvalidConnectionUrl(problem))
        })?;
        let mut hosts = target.hosts;
        let network_timeout = crate::config::NETWORK_TIMEOUT_DEFAULT;
        for config in &mut hosts {
            config
                .application_name(APPLICATION_NAME)
                .connect_timeout(connect_timeout)
                .keepalives(true)
                .keepalives_idle(network_timeout)
                .keepalives_interval(KEEPALIVE_INTERVAL)
                .keepalives_retries(KEEPALIVE_RETRIES)
                // Sent data that stays unacknowledged this long ends the connection, so a
                // query on a dead route fails in seconds rather than after the call
                // deadline (or never); see `network_timeout`.
                .tcp_user_timeout(network_timeout);
        }
        let setup = format!(
            "SET statement_timeout = {}; SET idle_in_transaction_session_timeout = {}",
            statement_timeout.as_millis().max(1),
            idle_in_transaction_timeout.as_millis().max(1),
        );
        let unanswered = hosts
            .iter()
            .map(|_| std::sync::atomic::AtomicBool::new(false))
            .collect();
        Ok(ConnectionSettings {
            hosts: hosts.into(),
            preferred: Arc::default(),
            unanswered,
            tls: target.tls,
            setup,
            connect_timeout,
        })
    }

    async fn open_with<T>(
        &self,
        config: &tokio_postgres::Config,
        tls: T,
    ) -> Result<AsyncPgConnection, DbError>
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>,
        T::Stream: Send + Unpin + 'static,
    {
        let (client, connection) = config.connect(tls).await.map_err(|error| {
            // tokio-postgres names the cause (a refused certificate, say) only in the
            // error's source.
            let cause = std::error::Error::source(&error)
                .map(|source| format!(": {source}"))
                .unwrap_or_default();
            DbError::Connect(diesel::ConnectionError::BadConnection(format!(
                "{error}{cause}"
            )))
        })?;
        Ok(AsyncPgConnection::try_from_client_and_connection(client, connection).await?)
    }

    /// Opens one connection, set up like every other (outside the pool: migrations,
    /// administrative commands, exports, the notification listener). With several hosts
    /// the first that opens (and, with `target_session_attrs=read-write`, takes writes) is
    /// used: after a failover the new primary is found by the next connection, whatever
    /// host it is. The host that last opened is tried first, then the others in the URL's
    /// order, except that hosts which did not answer the last time they were asked come
    /// last; each has its own connect timeout, and the next one starts as soon as the
    /// previous one fails or [`HOST_STAGGER`] after it started, whichever comes first, so
    /// that a host that never answers delays the others by the stagger at most once, not
    /// by a connect timeout each time. While a host has not answered, those that said no
    /// are asked again every [`HOST_STAGGER`] (within the connect timeout): a standby
    /// promoted while the old primary's packets are dropped is found at once.
    pub async fn connect(&self) -> Result<AsyncPgConnection, DbError> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        if let [config] = &*self.hosts {
            return match tokio::time::timeout(self.connect_timeout, self.open(config)).await {
                Ok(opened) => opened,
                Err(_) => Err(DbError::Deadline(self.connect_timeout)),
            };
        }
        let begun = tokio::time::Instant::now();
        // A host that said no is asked again only until then: the whole opening ends
        // within a connect timeout of its last start.
        let ask_again_until = begun + self.connect_timeout;
        let preferred = AtomicUsize::load(&self.preferred, Ordering::Relaxed);
        let mut order: Vec<usize> = (0..self.hosts.len()).collect();
        order.sort_by_key(|&index| {
            (
                std::sync::atomic::AtomicBool::load(&self.unanswered[index], Ordering::Relaxed),
                index != preferred,
                index,
            )
        });
        let mut waiting: std::collections::VecDeque<usize> = order.into();
        let attempt = |index: usize| async move {
            let started = tokio::time::Instant::now();
            let opened =
                tokio::time::timeout(self.connect_timeout, self.open(&self.hosts[index])).await;
            // tokio-postgres's own TCP connect timeout may be the one that fires.
            let answered = opened.is_ok() && started.elapsed() < self.connect_timeout;
            self.unanswered[index].store(!answered, Ordering::Relaxed);
            (index, opened)
        };
        let mut attempts = FuturesUnordered::new();
        // Hosts that said no (a standby: read-only), to be asked again while another host
        // has not answered: a standby promoted meanwhile is found by this opening, rather
        // than by the next one after the silent host's whole connect timeout.
        let mut again: Vec<(tokio::time::Instant, usize)> = Vec::new();
        let mut failures = std::collections::BTreeMap::new();
        let mut next_at = begun;
        // Bounded: each host starts once from the list, is asked again at most once a
        // stagger and only until `ask_again_until`, and each attempt ends within its
        // timeout.
        while !(attempts.is_empty() && waiting.is_empty()) {
            let again_at = again.iter().map(|(at, _)| *at).min();
            tokio::select! {
                () = tokio::time::sleep_until(next_at), if !waiting.is_empty() => {
                    if let Some(index) = waiting.pop_front() {
                        attempts.push(attempt(index));
                        next_at = tokio::time::Instant::now() + HOST_STAGGER;
                    }
                }
                () = tokio::time::sleep_until(again_at.unwrap_or(begun)), if again_at.is_some() => {
                    let now = tokio::time::Instant::now();
                    let (due, later): (Vec<_>, Vec<_>) =
                        again.into_iter().partition(|(at, _)| *at <= now);
                    again = later;
                    for (_, index) in due {
                        attempts.push(attempt(index));
                    }
                }
                Some((index, opened)) = attempts.next(), if !attempts.is_empty() => {
                    let now = tokio::time::Instant::now();
                    match opened {
                        Ok(Ok(connection)) => {
                            self.preferred.store(index, Ordering::Relaxed);
                            return Ok(connection);
                        }
                        Ok(Err(error)) => {
                            failures.insert(
                                index,
                                format!("{}: {error}", host_name(&self.hosts[index])),
                            );
                            let someone_silent = !attempts.is_empty() || !waiting.is_empty();
                            if someone_silent && now + HOST_STAGGER < ask_again_until {
                                again.push((now + HOST_STAGGER, index));
                            }
                        }
                        Err(_) => {
                            failures.insert(
                                index,
                                format!(
                                    "{}: no connection within {:?}",
                                    host_name(&self.hosts[index]),
                                    self.connect_timeout
                                ),
                            );
                        }
                    }
                    // A host that answered, whatever it said: the next one need not wait
                    // its turn.
                    next_at = now;
                }
            }
        }
        let failures: Vec<String> = failures.into_values().collect();
        Err(DbError::Connect(diesel::ConnectionError::BadConnection(
            format!("no host could be used ({})", failures.join("; ")),
        )))
    }

    async fn open(&self, config: &tokio_postgres::Config) -> Result<AsyncPgConnection, DbError> {
        let mut connection = match &self.tls {
            tls::Tls::Off => self.open_with(config, tokio_postgres::NoTls).await?,
            tls::Tls::Rustls(connector) => self.open_with(config, connector.clone()).await?,
        };
        connection
            .batch_execute(&self.setup)
            .await
            .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
        Ok(connection)
    }
}

/// `host:port` of a one-host configuration, for an error message (never the password).
fn host_name(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(name)) if name.contains(':') => format!("[{name}]"),
        Some(tokio_postgres::config::Host::Tcp(name)) => name.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "?".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// The process's database: a bb8 pool of diesel-async connections and the deadline of each
/// call. Every use of a pooled connection goes through [`Db::run`].
#[derive(Clone)]
pub struct Db {
    pool: DbPool,
    call_timeout: Duration,
    reachability: Arc<Reachability>,
    /// Calls waiting for a pooled connection (bb8 does not count them).
    waiting: Arc<AtomicUsize>,
    /// The share of the pool this handle's calls count against ([`Db::share`]); `None`:
    /// the whole pool.
    share: Option<Arc<tokio::sync::Semaphore>>,
    /// One operation's allowance ([`Db::for_operation`]).
    operation: Option<Arc<Allowance>>,
}

/// What one operation may still do.
struct Allowance {
    calls_left: AtomicUsize,
    calls: usize,
    /// Its calls holding (or waiting for) a connection at once.
    concurrent: tokio::sync::Semaphore,
}

/// What the pool holds at a moment, for `/metrics`.
#[derive(Debug, Clone, Copy)]
pub struct PoolUsage {
    pub in_use: u32,
    pub idle: u32,
    pub waiting: usize,
}

/// Counts a call as waiting for a connection until it has one or gives up.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn start(counter: &'a AtomicUsize) -> Waiting<'a> {
        counter.fetch_add(1, Ordering::Relaxed);
        Waiting(counter)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether the last attempt to open a connection failed, and when: while the database is
/// down, a request that finds no idle connection is answered at once instead of waiting
/// for a connection that cannot come, and one request at most every
/// [`PROBE_INTERVAL`] tries again (so recovery is noticed without a restart).
#[derive(Default)]
struct Reachability {
    /// Milliseconds since `since` of the last failed connection attempt; 0 when the last
    /// attempt succeeded.
    failed_at: AtomicU64,
    /// Milliseconds since `since` of the last request let through to try again.
    probed_at: AtomicU64,
    /// Milliseconds since `since` at which the last successful attempt started.
    connected_from: AtomicU64,
    since: std::sync::OnceLock<std::time::Instant>,
    /// Woken by every failed attempt: the pool does not tell a waiting checkout that the
    /// connection it waits for failed to open.
    attempt_failed: tokio::sync::Notify,
}

/// How often, while the database is unreachable, one request tries to connect again.
const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// How long that request waits for the connection its try opens. The opening goes on
/// without it, within the connect timeout, and the pool keeps the connection for the next
/// call: during a failover whose old primary's packets are dropped, an opening begun just
/// before the promotion may wait a whole connect timeout on that host, and a request
/// waiting with it would hold up the clients behind it for as long.
const PROBE_WAIT: Duration = Duration::from_secs(1);

impl Reachability {
    fn now_ms(&self) -> u64 {
        let since = self.since.get_or_init(std::time::Instant::now);
        u64::try_from(since.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    fn failing(&self) -> bool {
        AtomicU64::load(&self.failed_at, Ordering::SeqCst) > 0
    }

    /// An attempt that started at `started` (from [`Reachability::now_ms`]) opened.
    fn connected(&self, started: u64) {
        self.connected_from.fetch_max(started, Ordering::SeqCst);
        self.failed_at.store(0, Ordering::SeqCst);
    }

    /// An attempt that started at `started` failed. One that started before an attempt
    /// that has since opened says nothing about the database now: during a failover with
    /// a host whose packets are dropped, attempts begun before the promotion fail for
    /// seconds after one begun later found the new primary, and must not turn requests
    /// away meanwhile.
    fn failed(&self, started: u64) {
        if started < AtomicU64::load(&self.connected_from, Ordering::SeqCst) {
            return;
        }
        self.failed_at.store(self.now_ms(), Ordering::SeqCst);
        self.attempt_failed.notify_waiters();
    }

    /// Whether a request should give up at once: the last attempt failed, and another
    /// request is already trying again.
    fn refuse_now(&self) -> bool {
        if !self.failing() {
            return false;
        }
        let now = self.now_ms();
        let probed = AtomicU64::load(&self.probed_at, Ordering::SeqCst);
        if now.saturating_sub(probed) >= PROBE_INTERVAL.as_millis() as u64
            && self
                .probed_at
                .compare_exchange(probed, now, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return false;
        }
        true
    }
}

/// Work on one connection: an async closure whose future is `Send` (what every handler
/// and task needs). Implemented for every such closure.
pub trait ConnectionWork<'c, T>:
    AsyncFnOnce(&'c mut AsyncPgConnection) -> Result<T, DbError>
    + FnOnce(&'c mut AsyncPgConnection) -> <Self as ConnectionWork<'c, T>>::Fut
{
    type Fut: std::future::Future<Output = Result<T, DbError>> + Send;
}

impl<'c, T, F, Fut> ConnectionWork<'c, T> for F
where
    F: AsyncFnOnce(&'c mut AsyncPgConnection) -> Result<T, DbError>
        + FnOnce(&'c mut AsyncPgConnection) -> Fut,
    Fut: std::future::Future<Output = Result<T, DbError>> + Send,
{
    type Fut = Fut;
}

impl Db {
    /// Opens the pool. Every connection gets the statement timeout, TCP keepalives and the
    /// connect timeout, so no request or job holds a connection for ever.
    pub async fn connect(
        settings: ConnectionSettings,
        size: u32,
        call_timeout: Duration,
    ) -> Result<Db, DbError> {
        Db::connect_counted(settings, size, call_timeout, None).await
    }

    /// [`Db::connect`], optionally counting every statement into `counter` (tests prove
    /// that nested lists are batched by counting them).
    pub async fn connect_counted(
        settings: ConnectionSettings,
        size: u32,
        call_timeout: Duration,
        counter: Option<StatementCounter>,
    ) -> Result<Db, DbError> {
        let db = Db::open(settings, size, call_timeout, counter, Timelines::Enter);
        // Fail at start-up, not on the first request, when the database cannot be reached.
        db.run(async |_| Ok(())).await?;
        Ok(db)
    }

    /// [`Db::connect`] without a first connection: the pool opens them as calls need
    /// them, so a server that is down at start-up fails those calls, not the start (the
    /// read replica's pool: while its standby is down, reads go to the primary).
    /// Its connections only read, on a standby: they do not enter the timeline (that
    /// writes, and only the primary's writers need it).
    pub fn lazy(settings: ConnectionSettings, size: u32, call_timeout: Duration) -> Db {
        Db::open(settings, size, call_timeout, None, Timelines::Skip)
    }

    fn open(
        settings: ConnectionSettings,
        size: u32,
        call_timeout: Duration,
        counter: Option<StatementCounter>,
        timelines: Timelines,
    ) -> Db {
        let reachability = Arc::new(Reachability::default());
        let mut manager_config = ManagerConfig::default();
        let reach = reachability.clone();
        manager_config.custom_setup = Box::new(move |_url| {
            let counter = counter.clone();
            let settings = settings.clone();
            let reach = reach.clone();
            Box::pin(async move {
                let started = reach.now_ms();
                let opened = settings.connect().await;
                match &opened {
                    Ok(_) => reach.connected(started),
                    Err(_) => reach.failed(started),
                }
                let mut connection = opened.map_err(|error| match error {
                    DbError::Connect(error) => error,
                    other => diesel::ConnectionError::BadConnection(other.to_string()),
                })?;
                // Before the pool hands it out: every write of the service on a timeline
                // comes after its event ids were made safe (db/sql/enter_timeline.sql).
                let entered = match timelines {
                    Timelines::Enter => events::enter_timeline(&mut connection).await,
                    Timelines::Skip => Ok((None, false)),
                };
                match entered {
                    Ok((Some(timeline), true)) => tracing::warn!(
                        timeline,
                        "the database is on a new timeline (a failover): event ids moved on \
                         by {} so none is handed out twice",
                        events::TIMELINE_ID_MARGIN
                    ),
                    Ok(_) => {}
                    Err(error) => {
                        reach.failed(started);
                        return Err(diesel::ConnectionError::BadConnection(format!(
                            "cannot read the database's timeline: {}",
                            error.summary()
                        )));
                    }
                }
                // Counted from here: a connection's own set-up is no statement of a request.
                if let Some(counter) = counter {
                    use diesel_async::AsyncConnection;
                    connection.set_instrumentation(
                        move |event: diesel::connection::InstrumentationEvent<'_>| {
                            counter.observe(event)
                        },
                    );
                }
                Ok(connection)
            })
        });
        // The URL is unused: `custom_setup` connects with the settings above.
        let manager = Manager::new_with_config("postgres://", manager_config);
        let pool = bb8::Pool::builder()
            .max_size(size)
            .connection_timeout(CHECKOUT_TIMEOUT)
            // Broken connections are noticed when a query fails; a ping before every
            // checkout would add a round trip to every request.
            .test_on_check_out(false)
            // One attempt per connection wanted: a failure is recorded at once (see
            // `Reachability`) rather than retried inside the pool for seconds.
            .retry_connection(false)
            // No connection is opened here (there is no minimum of idle ones).
            .build_unchecked(manager);
        Db {
            pool,
            call_timeout,
            reachability,
            waiting: Arc::default(),
            share: None,
            operation: None,
        }
    }

    /// Runs `work` on a pooled connection within the call deadline. A call that misses it
    /// (a network that silently drops packets, say) fails with [`DbError::Deadline`] and
    /// its connection is discarded rather than returned to the pool mid-query.
    pub async fn run<T, F>(&self, work: F) -> Result<T, DbError>
    where
        F: for<'c> ConnectionWork<'c, T>,
    {
        let started = tokio::time::Instant::now();
        let _operation_permit = match &self.operation {
            Some(allowance) => Some(allowance.take_call().await?),
            None => None,
        };
        // Waiting for a place in the share counts against the checkout timeout, as waiting
        // for the pool itself would.
        let _share_permit = match &self.share {
            Some(share) => Some(
                tokio::time::timeout(CHECKOUT_TIMEOUT, share.acquire())
                    .await
                    .map_err(|_| DbError::ShareExhausted)?
                    .map_err(|_| DbError::ShareExhausted)?,
            ),
            None => None,
        };
        // Broken connections handed out so far: at most those the pool holds now and one
        // it opens, then give up.
        let broken_limit = self.pool.state().connections + 1;
        let mut broken = 0;
        let mut connection = loop {
            let idle = self.pool.state().idle_connections > 0;
            let (checkout_limit, probing) = if idle {
                (self.call_timeout, false)
            } else if self.reachability.refuse_now() {
                return Err(DbError::Unreachable);
            } else if self.reachability.failing() {
                // Trying again while the database was unreachable: the opening goes on
                // without this call if it takes longer (see `PROBE_WAIT`).
                (PROBE_WAIT.min(self.call_timeout), true)
            } else {
                (self.call_timeout, false)
            };
            let mut connection = {
                let _waiting = Waiting::start(&self.waiting);
                let attempt_failed = self.reachability.attempt_failed.notified();
                tokio::pin!(attempt_failed);
                attempt_failed.as_mut().enable();
                tokio::select! {
                    checkout = tokio::time::timeout(checkout_limit, self.pool.get()) => {
                        checkout.map_err(|_| if probing {
                            DbError::Unreachable
                        } else {
                            DbError::Deadline(checkout_limit)
                        })??
                    }
                    // The connection this checkout waits for may be the one that failed.
                    _ = attempt_failed, if !idle => return Err(DbError::Unreachable),
                }
            };
            // An idle connection whose server went away meanwhile (a primary that died or
            // was demoted in a failover closes its sessions) is known closed without a
            // round trip: take another rather than fail this call on it.
            if diesel_async::pooled_connection::PoolableConnection::is_broken(&mut *connection) {
                discard(&mut connection);
                broken += 1;
                if broken > broken_limit {
                    return Err(DbError::Unreachable);
                }
                continue;
            }
            break connection;
        };
        let remaining = self.call_timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(remaining, work(&mut connection)).await {
            Ok(Err(error)) if error.ends_connection() => {
                // A server that was demoted (a failover) or is shutting down answers this
                // way: the connection must not go back to the pool, where the next call
                // would fail on it too; a new one finds the current primary.
                discard(&mut connection);
                Err(error)
            }
            Ok(result) => result,
            Err(_) => {
                discard(&mut connection);
                Err(DbError::Deadline(self.call_timeout))
            }
        }
    }

    /// A handle on the same pool whose calls, together with those of every handle made
    /// from it, hold at most `connections` connections at once: what they cannot take is
    /// kept for the others (GraphQL's share, so that no query can starve intake and the
    /// workers).
    pub fn share(&self, connections: usize) -> Db {
        Db {
            share: Some(Arc::new(tokio::sync::Semaphore::new(connections))),
            ..self.clone()
        }
    }

    /// A handle for one operation (a GraphQL request): at most `calls` calls in all, and
    /// at most `concurrent` of them holding or waiting for a connection at once. Past the
    /// allowance a call fails with [`DbError::CallsExhausted`] without touching the pool.
    pub fn for_operation(&self, calls: usize, concurrent: usize) -> Db {
        Db {
            operation: Some(Arc::new(Allowance {
                calls_left: AtomicUsize::new(calls),
                calls,
                concurrent: tokio::sync::Semaphore::new(concurrent.max(1)),
            })),
            ..self.clone()
        }
    }

    /// Connections in use, idle, and calls waiting for one.
    pub fn usage(&self) -> PoolUsage {
        let state = self.pool.state();
        PoolUsage {
            in_use: state.connections - state.idle_connections,
            idle: state.idle_connections,
            waiting: AtomicUsize::load(&self.waiting, Ordering::Relaxed),
        }
    }

    /// Connections in use and requests waiting for one (tests).
    #[cfg(any(test, feature = "testing"))]
    pub fn state(&self) -> bb8::State {
        self.pool.state()
    }
}

impl Allowance {
    /// Counts one call, and waits for its turn among the operation's calls.
    async fn take_call(&self) -> Result<tokio::sync::SemaphorePermit<'_>, DbError> {
        let exhausted = DbError::CallsExhausted { limit: self.calls };
        self.calls_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .map_err(|_| DbError::CallsExhausted { limit: self.calls })?;
        self.concurrent.acquire().await.map_err(|_| exhausted)
    }
}

/// Marks a connection broken, so the pool closes it instead of handing it out again: a
/// call abandoned mid-query leaves it in an unknown state.
fn discard(connection: &mut AsyncPgConnection) {
    use diesel_async::TransactionManager;
    diesel_async::AnsiTransactionManager::transaction_manager_status_mut(connection).set_in_error();
}

/// Counts the statements a pool's connections run, and records the text of every
/// statement one of them prepares into its statement cache (tests prove that nested lists
/// are batched, and that paged queries are prepared once per connection, not re-planned).
pub type StatementCounter = Arc<StatementLog>;

#[derive(Debug, Default)]
pub struct StatementLog {
    statements: AtomicUsize,
    prepared: std::sync::Mutex<Vec<String>>,
}

impl StatementLog {
    fn observe(&self, event: diesel::connection::InstrumentationEvent<'_>) {
        use diesel::connection::InstrumentationEvent;
        match event {
            InstrumentationEvent::StartQuery { .. } => {
                self.statements.fetch_add(1, Ordering::SeqCst);
            }
            // Diesel emits this only for a statement it is about to prepare and keep.
            InstrumentationEvent::CacheQuery { sql, .. } => {
                self.prepared
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(sql.to_string());
            }
            _ => {}
        }
    }

    #[cfg(any(test, feature = "testing"))]
    /// Statements run since the last [`StatementLog::reset`].
    pub fn statements(&self) -> usize {
        // Spelled out: `RunQueryDsl::load` is in scope here too.
        AtomicUsize::load(&self.statements, Ordering::SeqCst)
    }

    #[cfg(any(test, feature = "testing"))]
    /// The text of each statement prepared into a connection's cache since the last reset,
    /// once per prepare.
    pub fn prepared(&self) -> Vec<String> {
        self.prepared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn reset(&self) {
        self.statements.store(0, Ordering::SeqCst);
        self.prepared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }
}

/// One connection outside the pool with the timeouts of administrative work, for
/// migrations and commands.
pub async fn connect_one(url: &Secret) -> Result<AsyncPgConnection, DbError> {
    ConnectionSettings::admin(url)?.connect().await
}

/// The statement timeout of administrative work: migrations and retention may run long.
const ADMIN_STATEMENT_TIMEOUT: Duration = Duration::from_secs(3600);
/// The call deadline to go with it.
pub const ADMIN_CALL_TIMEOUT: Duration =
    Duration::from_secs(3600 + crate::config::CALL_TIMEOUT_MARGIN.as_secs());

impl ConnectionSettings {
    /// Settings for administrative connections (migrations, commands).
    pub fn admin(url: &Secret) -> Result<ConnectionSettings, DbError> {
        ConnectionSettings::with_timeouts(
            url,
            ADMIN_STATEMENT_TIMEOUT,
            ADMIN_STATEMENT_TIMEOUT,
            Duration::from_secs(10),
        )
    }
}

impl ConnectionSettings {
    /// The same settings under another `application_name` (the read replica's
    /// connections, so that an operator tells them apart on the standby).
    pub fn named(self, application_name: &str) -> ConnectionSettings {
        self.each_host(|config| {
            config.application_name(application_name);
        })
    }
}

/// Whether a pool's connections enter the server's timeline when they open
/// (db/sql/enter_timeline.sql): the primary's pools do; a read replica's does not.
#[derive(Debug, Clone, Copy)]
enum Timelines {
    Enter,
    Skip,
}

/// `SELECT 1` through the pool: the readiness probe.
pub async fn ping(db: &Db) -> Result<(), DbError> {
    db.run(async |conn| {
        diesel::sql_query("SELECT 1").execute(conn).await?;
        Ok(())
    })
    .await
}

/// Creates `database` on the server of `admin_url` unless it exists.
pub async fn create_database_if_missing(admin_url: &Secret, database: &str) -> Result<(), DbError> {
    use diesel::sql_types::Text;
    #[derive(diesel::QueryableByName)]
    struct Found {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        found: bool,
    }
    let mut connection = connect_one(admin_url).await?;
    let existing: Found =
        diesel::sql_query("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS found")
            .bind::<Text, _>(database)
            .get_result(&mut connection)
            .await?;
    if !existing.found {
        diesel::sql_query(format!("CREATE DATABASE {}", quote_identifier(database)))
            .execute(&mut connection)
            .await?;
    }
    Ok(())
}

/// Quotes an identifier for the few statements (CREATE DATABASE) that take no parameters.
pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
