//! Reading one variable at a time: each reader parses and checks a value, records a
//! failure under the variable's name and goes on, so that one pass reports every invalid
//! variable. Every name asked for is remembered: the list of variables the service knows
//! is what a read of an empty environment asks for, not a second list kept by hand.

use std::net::SocketAddr;
use std::time::Duration;

use super::{ConfigError, LogFormat, Secret};

pub(super) struct Reader<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    pub(super) errors: Vec<ConfigError>,
    /// Every variable asked for, in the order asked.
    pub(super) asked: Vec<&'static str>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Reader<'a> {
        Reader {
            lookup,
            errors: Vec::new(),
            asked: Vec::new(),
        }
    }

    /// The value, or `None` when unset or empty (an empty value counts as unset).
    pub(super) fn raw(&mut self, name: &'static str) -> Option<String> {
        if !self.asked.contains(&name) {
            self.asked.push(name);
        }
        (self.lookup)(name).filter(|value| !value.trim().is_empty())
    }

    /// Whether any of `variables` failed its own rule (a rule between variables is only
    /// checked when each of them is valid on its own).
    pub(super) fn failed(&self, variables: &[&str]) -> bool {
        self.errors.iter().any(|e| variables.contains(&e.variable))
    }

    pub(super) fn fail(&mut self, variable: &'static str, problem: String, rule: &str) {
        self.errors.push(ConfigError {
            variable,
            problem,
            rule: rule.to_string(),
        });
    }

    // Each reader returns the default after recording a failure, so that one pass reports
    // every invalid variable; `from_lookup` returns no `Config` when any failure was recorded.

    pub(super) fn integer(&mut self, name: &'static str, default: u64, min: u64, max: u64) -> u64 {
        let Some(raw) = self.raw(name) else {
            return default;
        };
        let rule = format!("a whole number from {min} to {max}");
        match raw.trim().parse::<u64>() {
            Ok(value) if (min..=max).contains(&value) => value,
            Ok(value) => {
                self.fail(name, format!("{value} is out of range"), &rule);
                default
            }
            Err(_) => {
                self.fail(
                    name,
                    format!("{:?} is not a whole number", shorten(&raw)),
                    &rule,
                );
                default
            }
        }
    }

    /// Seconds as a positive decimal number (`0.5` allowed, for tests and fast local setups).
    pub(super) fn seconds(&mut self, name: &'static str, default: f64) -> Duration {
        let fallback = Duration::from_secs_f64(default);
        let Some(raw) = self.raw(name) else {
            return fallback;
        };
        let rule = "a number of seconds greater than 0 (at most 31536000)";
        match raw.trim().parse::<f64>() {
            Ok(value) if value.is_finite() && value > 0.0 && value <= 31_536_000.0 => {
                Duration::from_secs_f64(value)
            }
            Ok(_) => {
                self.fail(
                    name,
                    format!("{} is out of range", shorten(raw.trim())),
                    rule,
                );
                fallback
            }
            Err(_) => {
                self.fail(name, format!("{:?} is not a number", shorten(&raw)), rule);
                fallback
            }
        }
    }

    pub(super) fn boolean(&mut self, name: &'static str, default: bool) -> bool {
        let Some(raw) = self.raw(name) else {
            return default;
        };
        match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => true,
            "false" | "0" | "no" | "off" => false,
            _ => {
                self.fail(
                    name,
                    format!("{:?} is not a boolean", shorten(&raw)),
                    "true or false (also 1/0, yes/no, on/off)",
                );
                default
            }
        }
    }

    /// `None` when unset.
    pub(super) fn socket_addr(&mut self, name: &'static str) -> Option<SocketAddr> {
        let raw = self.raw(name)?;
        match raw.trim().parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                self.fail(
                    name,
                    format!("{:?} is not an IP address and port", shorten(&raw)),
                    "HOST:PORT with a literal IP address, for example 127.0.0.1:8080 or [::]:8080",
                );
                None
            }
        }
    }

    /// A secret of at least `min_chars` characters, or `None` when unset. Only the length
    /// of a refused value is reported.
    pub(super) fn secret(&mut self, name: &'static str, min_chars: usize) -> Option<Secret> {
        let raw = self.raw(name)?;
        let length = raw.chars().count();
        if length < min_chars {
            self.fail(
                name,
                format!("the value has {length} characters"),
                &format!("at least {min_chars} characters, or unset"),
            );
            return None;
        }
        Some(Secret::new(raw))
    }

    pub(super) fn log_format(&mut self, name: &'static str) -> LogFormat {
        let Some(raw) = self.raw(name) else {
            return LogFormat::Text;
        };
        match raw.trim().to_ascii_lowercase().as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            _ => {
                self.fail(
                    name,
                    format!("{:?} is not a known format", shorten(&raw)),
                    "text or json",
                );
                LogFormat::Text
            }
        }
    }
}

/// Keeps error messages readable when someone pastes a long value into a variable.
pub(super) fn shorten(raw: &str) -> String {
    const LIMIT: usize = 64;
    if raw.chars().count() <= LIMIT {
        raw.to_string()
    } else {
        let mut cut: String = raw.chars().take(LIMIT).collect();
        cut.push('…');
        cut
    }
}
