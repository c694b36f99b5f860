//! `FORMS_DATABASE_READ_*`: a streaming standby of the primary for the reads that may trail
//! it (docs/operations.md, "Read replicas").

use std::time::Duration;

use super::reader::Reader;
use super::Secret;

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
pub(super) fn read(r: &mut Reader, primary_set: bool) -> Option<ReadReplicaConfig> {
    let url = super::database::url(
        r,
        URL,
        super::database::UrlRole::ReadReplica,
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
