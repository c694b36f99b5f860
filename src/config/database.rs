//! `FORMS_DATABASE_*`, `FORMS_DATA_DIR`, `FORMS_AUTO_MIGRATE`: where the database is and how
//! the pool uses it; `FORMS_DATABASE_READ_*`: a streaming standby for the reads that may trail
//! the primary.

use std::path::PathBuf;
use std::time::Duration;

use super::reader::Reader;
use super::Secret;

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
    let read = read_replica(r, url.is_some());
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

// `FORMS_DATABASE_READ_*`: a streaming standby of the primary for the reads that may trail
// it (docs/operations.md, "Read replicas").

#[derive(Debug, Clone)]
pub struct ReadReplicaConfig {
    pub url: Secret,
    /// Connections to the standby (GraphQL queries, subscriptions' catch-up).
    pub pool_size: u32,
    /// Past this lag behind the primary, reads go to the primary.
    pub max_lag: Duration,
}

const URL: &str = "FORMS_DATABASE_READ_URL";
const OTHERS: [&str; 2] = [
    "FORMS_DATABASE_READ_POOL_SIZE",
    "FORMS_DATABASE_READ_MAX_LAG_SECONDS",
];

/// `primary_set`: whether `FORMS_DATABASE_URL` is (the embedded cluster has no standby).
fn read_replica(r: &mut Reader, primary_set: bool) -> Option<ReadReplicaConfig> {
    let url = url(
        r,
        URL,
        UrlRole::ReadReplica,
        "a postgres:// or postgresql:// URL (or keyword=value pairs) of a streaming standby of FORMS_DATABASE_URL, or unset",
    );
    let pool_size = r.integer(OTHERS[0], 8, 1, 10_000) as u32;
    let max_lag = r.seconds(OTHERS[1], 5.0);
    let Some(url) = url else {
        // Set for nothing, they would suggest reads go to a replica that is not there.
        for name in OTHERS {
            if r.raw(name).is_some() && !r.failed(&[name]) {
                r.fail(
                    name,
                    format!("set without {URL}"),
                    "only with FORMS_DATABASE_READ_URL",
                );
            }
        }
        return None;
    };
    if !primary_set {
        r.fail(
            URL,
            "set without FORMS_DATABASE_URL".into(),
            "only with FORMS_DATABASE_URL: the embedded cluster has no standby",
        );
        return None;
    }
    Some(ReadReplicaConfig {
        url,
        pool_size,
        max_lag,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use crate::config::{Config, ConfigErrors};

    fn load(vars: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        Config::from_lookup(|name| map.get(name).map(|value| value.to_string()))
    }

    const PRIMARY: (&str, &str) = ("FORMS_DATABASE_URL", "postgres://u:p@primary/forms");
    const STANDBY: (&str, &str) = ("FORMS_DATABASE_READ_URL", "postgres://u:p@standby/forms");

    #[test]
    fn unset_means_every_read_on_the_primary() {
        assert!(load(&[PRIMARY]).unwrap().database.read.is_none());
    }

    #[test]
    fn the_defaults_are_eight_connections_and_five_seconds() {
        let read = load(&[PRIMARY, STANDBY]).unwrap().database.read.unwrap();
        assert_eq!(read.pool_size, 8);
        assert_eq!(read.max_lag, Duration::from_secs(5));
        assert_eq!(read.url.expose(), STANDBY.1);
    }

    #[test]
    fn the_lag_takes_fractions_of_a_second() {
        let read = load(&[
            PRIMARY,
            STANDBY,
            ("FORMS_DATABASE_READ_MAX_LAG_SECONDS", "0.5"),
            ("FORMS_DATABASE_READ_POOL_SIZE", "3"),
        ])
        .unwrap()
        .database
        .read
        .unwrap();
        assert_eq!(read.max_lag, Duration::from_millis(500));
        assert_eq!(read.pool_size, 3);
    }

    #[test]
    fn invalid_values_name_their_variable_with_the_url_set() {
        for (variable, value, expected) in [
            ("FORMS_DATABASE_READ_POOL_SIZE", "0", "out of range"),
            ("FORMS_DATABASE_READ_MAX_LAG_SECONDS", "0", "greater than 0"),
            (
                "FORMS_DATABASE_READ_MAX_LAG_SECONDS",
                "soon",
                "not a number",
            ),
        ] {
            let errors = load(&[PRIMARY, STANDBY, (variable, value)])
                .expect_err(variable)
                .0;
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert_eq!(errors[0].variable, variable);
            assert!(errors[0].to_string().contains(expected), "{errors:?}");
        }
    }

    #[test]
    fn the_url_is_never_echoed() {
        let errors = load(&[
            PRIMARY,
            ("FORMS_DATABASE_READ_URL", "mysql://u:hunter2@standby/forms"),
        ])
        .expect_err("not a postgres URL");
        assert!(!errors.to_string().contains("hunter2"), "{errors}");
    }
}
