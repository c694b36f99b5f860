//! `FORMS_DATABASE_*`, `FORMS_DATA_DIR`, `FORMS_AUTO_MIGRATE`: where the database is and how
//! the pool uses it.

use std::path::PathBuf;
use std::time::Duration;

use super::reader::Reader;
use super::{ReadReplicaConfig, Secret};

#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    /// `None`: the embedded cluster under `data_dir`.
    pub url: Option<Secret>,
    pub pool_size: u32,
    pub statement_timeout: Duration,
    /// How long opening a connection may take.
    pub connect_timeout: Duration,
    /// How long the network to the database may stay silent before a connection is given
    /// up (`TCP_USER_TIMEOUT`, and the TCP keepalive idle time): a primary cut off from
    /// the network hangs its connections rather than closing them, and they must end in
    /// seconds for the pool to find the promoted standby (docs/operations.md, "Failover").
    pub network_timeout: Duration,
    /// `idle_in_transaction_session_timeout` of every connection: a transaction left
    /// open (a client that stopped reading an export, say) ends after this long.
    pub idle_in_transaction_timeout: Duration,
    pub data_dir: PathBuf,
    pub auto_migrate: bool,
    /// A streaming standby for the reads that may trail the primary
    /// (`FORMS_DATABASE_READ_*`); `None`: every read goes to the primary.
    pub read: Option<ReadReplicaConfig>,
}

impl DatabaseConfig {
    /// The client-side deadline of one database call: a little past the server's own
    /// statement timeout, so that the server's clean error normally comes first and only
    /// a silent network ends a call here.
    pub fn call_timeout(&self) -> Duration {
        self.statement_timeout + CALL_TIMEOUT_MARGIN
    }
}

/// See [`DatabaseConfig::call_timeout`].
pub const CALL_TIMEOUT_MARGIN: Duration = Duration::from_secs(2);

/// `FORMS_DATABASE_NETWORK_TIMEOUT_SECONDS`'s default, also that of connections made
/// outside the configuration (migrations, commands): short enough that connections to a
/// primary lost in a failover are gone before any failover manager promotes its standby,
/// long enough for a healthy network's retransmissions.
pub const NETWORK_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

pub(super) fn read(r: &mut Reader) -> DatabaseConfig {
    let url = url(
        r,
        "FORMS_DATABASE_URL",
        UrlRole::Primary,
        "a postgres:// or postgresql:// URL or libpq keyword=value pairs, or unset for the embedded cluster",
    );
    let read = super::replica::read(r, url.is_some());
    let network_timeout = r.seconds(
        "FORMS_DATABASE_NETWORK_TIMEOUT_SECONDS",
        NETWORK_TIMEOUT_DEFAULT.as_secs_f64(),
    );
    // TCP keepalive counts whole seconds: below one it would be refused by the kernel (or
    // turned into no probe at all).
    if network_timeout < Duration::from_secs(1) {
        r.fail(
            "FORMS_DATABASE_NETWORK_TIMEOUT_SECONDS",
            format!("{} s is below 1 s", network_timeout.as_secs_f64()),
            "a number of seconds, at least 1",
        );
    }
    DatabaseConfig {
        url,
        pool_size: r.integer("FORMS_DATABASE_POOL_SIZE", 16, 1, 10_000) as u32,
        statement_timeout: r.seconds("FORMS_DATABASE_STATEMENT_TIMEOUT_SECONDS", 30.0),
        connect_timeout: r.seconds("FORMS_DATABASE_CONNECT_TIMEOUT_SECONDS", 5.0),
        network_timeout,
        idle_in_transaction_timeout: r
            .seconds("FORMS_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS", 60.0),
        data_dir: PathBuf::from(
            r.raw("FORMS_DATA_DIR")
                .unwrap_or_else(|| "./.hymical".into()),
        ),
        auto_migrate: r.boolean("FORMS_AUTO_MIGRATE", false),
        read,
    }
}

/// What a database URL connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UrlRole {
    /// Writes: with several hosts, only the one that accepts them (`read-write`).
    Primary,
    /// Reads only (`FORMS_DATABASE_READ_URL`).
    ReadReplica,
}

/// A PostgreSQL URL in `name` (the primary's and the read replica's follow one rule).
pub(super) fn url(r: &mut Reader, name: &'static str, role: UrlRole, rule: &str) -> Option<Secret> {
    let raw = r.raw(name)?;
    // The URL may hold a password: problems are described, the value never repeated.
    if !crate::postgres_url::is_url(&raw) && !raw.contains('=') {
        r.fail(
            name,
            "the value is neither a postgres:// or postgresql:// URL nor libpq's keyword=value form".into(),
            rule,
        );
        return None;
    }
    // Also reads `sslrootcert`, so a missing certificate file is reported here.
    let target = match crate::postgres_url::parse(&raw) {
        Ok(target) => target,
        Err(problem) => {
            r.fail(name, problem, rule);
            return None;
        }
    };
    // Several hosts are a primary and its standbys: without the read-write check a
    // connection could land on a standby, where every write fails. (A read replica's URL
    // may name several standbys and lands on any of them.)
    if role == UrlRole::Primary
        && target.hosts.len() > 1
        && target.hosts.iter().any(|host| {
            host.get_target_session_attrs() != tokio_postgres::config::TargetSessionAttrs::ReadWrite
        })
    {
        r.fail(
            name,
            format!(
                "the URL names {} hosts but not target_session_attrs=read-write",
                target.hosts.len()
            ),
            rule,
        );
        return None;
    }
    Some(Secret::new(raw))
}
