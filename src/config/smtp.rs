//! `FORMS_SMTP_*`: the mail server that email destinations are sent through
//! (`delivery/email.rs`). Unset `FORMS_SMTP_HOST` turns email off; every other variable
//! of the section is then an error when set, so that a half-written configuration is
//! never silently ignored.
//!
//! TLS is never given up quietly: `starttls` (the default) requires the server to
//! upgrade before anything else is said, `tls` speaks TLS from the first byte, and
//! `none` is refused unless the host is a loopback address or the operator also sets
//! `FORMS_SMTP_ALLOW_PLAINTEXT=true` (a relay on a private network, say).

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use lettre::message::Mailbox;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use super::reader::{shorten, Reader};
use super::Secret;

/// How the connection to the mail server is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// `starttls`: plaintext greeting, then STARTTLS is required before EHLO is repeated;
    /// a server that does not offer it is a failed connection, never a plaintext one.
    StartTls,
    /// `tls`: implicit TLS (SMTPS) from the first byte.
    Implicit,
    /// `none`: plaintext throughout (loopback, or `FORMS_SMTP_ALLOW_PLAINTEXT`).
    None,
}

impl SmtpTls {
    /// The port a mode is normally served on (RFC 8314, RFC 6409, RFC 5321).
    fn default_port(self) -> u16 {
        match self {
            SmtpTls::StartTls => 587,
            SmtpTls::Implicit => 465,
            SmtpTls::None => 25,
        }
    }
}

/// The account the mail server is logged in to with (AUTH PLAIN or LOGIN).
#[derive(Debug, Clone)]
pub struct SmtpCredentials {
    pub username: String,
    pub password: Secret,
}

/// Certificate authorities trusted for the mail server instead of the Mozilla roots.
#[derive(Clone)]
pub struct SmtpCaCertificates {
    /// The file they were read from, for messages.
    pub path: PathBuf,
    /// DER, each parsed once by rustls at start-up.
    pub certificates: Vec<CertificateDer<'static>>,
}

impl fmt::Debug for SmtpCaCertificates {
    // The certificates' bytes would only bury the path in a debug print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpCaCertificates")
            .field("path", &self.path)
            .field("certificates", &self.certificates.len())
            .finish()
    }
}

/// Where and how email is sent; present only when `FORMS_SMTP_HOST` is set.
#[derive(Debug, Clone)]
pub struct SmtpConfig {
    /// A DNS name or an IP address, also the name the certificate must carry.
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    pub credentials: Option<SmtpCredentials>,
    /// The sender (`From` and the envelope's `MAIL FROM`); its domain names Message-IDs.
    pub from: Mailbox,
    /// Connecting and the whole conversation of one message must end within it.
    pub timeout: Duration,
    /// `None`: the Mozilla roots (webpki-roots), as for webhooks.
    pub ca_certificates: Option<SmtpCaCertificates>,
}

const HOST: &str = "FORMS_SMTP_HOST";
const PORT: &str = "FORMS_SMTP_PORT";
const TLS: &str = "FORMS_SMTP_TLS";
const ALLOW_PLAINTEXT: &str = "FORMS_SMTP_ALLOW_PLAINTEXT";
const USERNAME: &str = "FORMS_SMTP_USERNAME";
const PASSWORD: &str = "FORMS_SMTP_PASSWORD";
const FROM: &str = "FORMS_SMTP_FROM";
const TIMEOUT: &str = "FORMS_SMTP_TIMEOUT_SECONDS";
const CA_FILE: &str = "FORMS_SMTP_CA_FILE";

/// Reads the section. Every variable is read (and so known) whether or not the host is
/// set; the value is `None` when email is off or when any variable failed.
pub(super) fn read(r: &mut Reader) -> Option<SmtpConfig> {
    let host = read_host(r);
    let tls = read_tls(r);
    let port = read_port(r);
    let allow_plaintext = r.boolean(ALLOW_PLAINTEXT, false);
    let username = read_login_part(r, USERNAME);
    let password = read_login_part(r, PASSWORD).map(Secret::new);
    let from = read_from(r);
    let timeout = r.seconds(TIMEOUT, 30.0);
    let ca_certificates = read_ca_file(r);

    let Some(host) = host else {
        if r.failed(&[HOST]) {
            return None;
        }
        // Email is off; a value set for it anyway is a configuration the operator meant
        // to take effect, so it is named rather than ignored. A variable that already
        // failed its own rule is not named twice.
        let set = [
            (PORT, port.is_some()),
            (TLS, tls.is_some()),
            (ALLOW_PLAINTEXT, allow_plaintext),
            (USERNAME, username.is_some()),
            (PASSWORD, password.is_some()),
            (FROM, from.is_some()),
            (TIMEOUT, r.raw(TIMEOUT).is_some()),
            (CA_FILE, ca_certificates.is_some()),
        ];
        for (variable, is_set) in set {
            if is_set && !r.failed(&[variable]) {
                r.fail(
                    variable,
                    format!("set, but {HOST} is not"),
                    &format!("only with {HOST} (unset: no email is sent)"),
                );
            }
        }
        return None;
    };

    let tls = tls.unwrap_or(SmtpTls::StartTls);
    let host_is_loopback = is_loopback(&host);
    if tls == SmtpTls::None && !host_is_loopback && !allow_plaintext && !r.failed(&[TLS]) {
        r.fail(
            TLS,
            format!("none, and {host} is not a loopback address"),
            &format!(
                "starttls or tls; none only with a loopback {HOST} (localhost, 127.0.0.0/8, \
                 ::1) or with {ALLOW_PLAINTEXT}=true"
            ),
        );
    }
    if allow_plaintext && tls != SmtpTls::None && !r.failed(&[TLS]) {
        r.fail(
            ALLOW_PLAINTEXT,
            format!("true, but {TLS} is not none: nothing is sent in plaintext"),
            &format!("true only with {TLS}=none"),
        );
    }

    let credentials = match (username, password) {
        (Some(username), Some(password)) => Some(SmtpCredentials { username, password }),
        (None, None) => None,
        (Some(_), None) if !r.failed(&[PASSWORD]) => {
            missing_half(r, PASSWORD, USERNAME);
            None
        }
        (None, Some(_)) if !r.failed(&[USERNAME]) => {
            missing_half(r, USERNAME, PASSWORD);
            None
        }
        // The half that is set failed its own rule, which is reported already.
        _ => None,
    };

    let from = match from {
        Some(from) => from,
        None => {
            if !r.failed(&[FROM]) {
                r.fail(
                    FROM,
                    "unset".to_string(),
                    &format!("the sender's email address, required with {HOST}"),
                );
            }
            return None;
        }
    };

    Some(SmtpConfig {
        port: port.unwrap_or(tls.default_port()),
        host,
        tls,
        credentials,
        from,
        timeout,
        ca_certificates,
    })
}

fn missing_half(r: &mut Reader, unset: &'static str, set: &str) {
    r.fail(
        unset,
        format!("unset, but {set} is set"),
        &format!("{USERNAME} and {PASSWORD} together, or neither"),
    );
}

/// A DNS name or an IP address, as written in a certificate: no port, no brackets, no
/// scheme. International names are written in their ASCII (punycode) form.
fn read_host(r: &mut Reader) -> Option<String> {
    let raw = r.raw(HOST)?;
    let host = raw.trim();
    if host.parse::<IpAddr>().is_ok() || is_dns_name(host) {
        return Some(host.to_ascii_lowercase());
    }
    r.fail(
        HOST,
        format!("{:?} is not a host name or an IP address", shorten(&raw)),
        &format!(
            "a DNS name (ASCII, punycode for international names) or an IP address, without \
             a port (that is {PORT}), brackets or scheme"
        ),
    );
    None
}

fn is_dns_name(host: &str) -> bool {
    let name = host.strip_suffix('.').unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Loopback by its literal address, or `localhost` (RFC 6761: always the loopback).
fn is_loopback(host: &str) -> bool {
    match host.parse::<IpAddr>() {
        Ok(address) => address.is_loopback(),
        Err(_) => host.trim_end_matches('.') == "localhost",
    }
}

fn read_tls(r: &mut Reader) -> Option<SmtpTls> {
    let raw = r.raw(TLS)?;
    match raw.trim().to_ascii_lowercase().as_str() {
        "starttls" => Some(SmtpTls::StartTls),
        "tls" => Some(SmtpTls::Implicit),
        "none" => Some(SmtpTls::None),
        _ => {
            r.fail(
                TLS,
                format!("{:?} is not a known mode", shorten(&raw)),
                "starttls, tls or none",
            );
            None
        }
    }
}

/// `None` when unset (the default then depends on the TLS mode) or invalid.
fn read_port(r: &mut Reader) -> Option<u16> {
    r.raw(PORT)?;
    let failures = r.errors.len();
    let port = r.integer(PORT, 0, 1, 65_535);
    (r.errors.len() == failures).then_some(port as u16)
}

/// The user name or the password, exactly as written (no trimming: either may hold
/// spaces), refusing control characters, which only a mangled `.env` line puts there.
/// Only a length is reported, never the value.
fn read_login_part(r: &mut Reader, variable: &'static str) -> Option<String> {
    let raw = r.raw(variable)?;
    if raw.chars().any(char::is_control) {
        r.fail(
            variable,
            format!(
                "the value ({} characters) holds a control character",
                raw.chars().count()
            ),
            "no control characters (line breaks, tabs)",
        );
        return None;
    }
    Some(raw)
}

/// `forms@example.com` or `Hymical Forms <forms@example.com>`: one mailbox, its address
/// in ASCII (a non-ASCII one would need SMTPUTF8 of every server, and fail at the first
/// that lacks it).
fn read_from(r: &mut Reader) -> Option<Mailbox> {
    let raw = r.raw(FROM)?;
    let rule = "one email address, optionally with a display name: forms@example.com or \
                Hymical Forms <forms@example.com>; the address in ASCII";
    if raw.chars().any(char::is_control) {
        r.fail(
            FROM,
            format!("{:?} holds a control character", shorten(&raw)),
            rule,
        );
        return None;
    }
    match raw.trim().parse::<Mailbox>() {
        Ok(mailbox) if mailbox.email.to_string().is_ascii() => Some(mailbox),
        Ok(_) => {
            r.fail(
                FROM,
                format!("{:?} is not an ASCII address", shorten(&raw)),
                rule,
            );
            None
        }
        Err(_) => {
            r.fail(
                FROM,
                format!("{:?} is not an email address", shorten(&raw)),
                rule,
            );
            None
        }
    }
}

/// Read at start-up, so that an unreadable file stops the process rather than every
/// message.
fn read_ca_file(r: &mut Reader) -> Option<SmtpCaCertificates> {
    let path = PathBuf::from(r.raw(CA_FILE)?);
    let rule = "a PEM file of one or more CA certificates";
    let certificates = match CertificateDer::pem_file_iter(&path)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
    {
        Ok(certificates) => certificates,
        Err(error) => {
            r.fail(
                CA_FILE,
                format!("{} cannot be read as PEM: {error}", path.display()),
                rule,
            );
            return None;
        }
    };
    let (usable, _) = RootCertStore::empty().add_parsable_certificates(certificates.clone());
    if usable == 0 || usable != certificates.len() {
        r.fail(
            CA_FILE,
            format!(
                "{} holds {} certificates, of which {usable} are usable",
                path.display(),
                certificates.len()
            ),
            rule,
        );
        return None;
    }
    Some(SmtpCaCertificates { path, certificates })
}

#[cfg(test)]
mod tests {
    use super::super::tests::load;
    use super::*;

    fn smtp(vars: &[(&str, &str)]) -> SmtpConfig {
        let mut all = vec![(HOST, "smtp.example.com"), (FROM, "forms@example.com")];
        all.extend_from_slice(vars);
        load(&all)
            .expect("valid")
            .smtp
            .expect("FORMS_SMTP_HOST is set")
    }

    /// The one error of a configuration, which must name `variable`.
    fn error(vars: &[(&str, &str)], variable: &str) -> String {
        let errors = load(vars).expect_err("invalid").0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].variable, variable, "{errors:?}");
        errors[0].to_string()
    }

    #[test]
    fn unset_host_means_no_email() {
        assert!(load(&[]).expect("valid").smtp.is_none());
    }

    #[test]
    fn defaults_follow_the_tls_mode() {
        let config = smtp(&[]);
        assert_eq!(config.host, "smtp.example.com");
        assert_eq!(config.tls, SmtpTls::StartTls);
        assert_eq!(config.port, 587);
        assert_eq!(config.timeout, Duration::from_secs(30));
        assert!(config.credentials.is_none());
        assert!(config.ca_certificates.is_none());
        assert_eq!(config.from.email.to_string(), "forms@example.com");
        assert_eq!(smtp(&[(TLS, "tls")]).port, 465);
        assert_eq!(smtp(&[(TLS, "TLS"), (PORT, "2465")]).port, 2465);
        let local = load(&[
            (HOST, "127.0.0.1"),
            (FROM, "forms@example.com"),
            (TLS, "none"),
        ])
        .expect("plaintext to loopback is allowed")
        .smtp
        .expect("set");
        assert_eq!((local.tls, local.port), (SmtpTls::None, 25));
    }

    #[test]
    fn the_sender_may_carry_a_display_name() {
        let config = smtp(&[(FROM, "Hymical Forms <forms@example.com>")]);
        assert_eq!(config.from.name.as_deref(), Some("Hymical Forms"));
        assert_eq!(config.from.email.domain(), "example.com");
        let with_host = [(HOST, "smtp.example.com")];
        for from in [
            "forms@example.com\r\nBcc: x@example.org",
            "a@example.com, b@example.com",
            "forms",
            "@example.com",
            "förms@example.com",
        ] {
            let vars = [with_host[0], (FROM, from)];
            let message = error(&vars, FROM);
            assert!(message.contains("email address"), "{from}: {message}");
        }
        let message = error(&[(HOST, "smtp.example.com")], FROM);
        assert!(message.contains("required"), "{message}");
    }

    #[test]
    fn plaintext_needs_loopback_or_consent() {
        let base = [(HOST, "relay.internal"), (FROM, "forms@example.com")];
        let message = error(&[base[0], base[1], (TLS, "none")], TLS);
        assert!(message.contains("not a loopback address"), "{message}");
        let consented = load(&[base[0], base[1], (TLS, "none"), (ALLOW_PLAINTEXT, "true")])
            .expect("plaintext allowed by the operator")
            .smtp
            .expect("set");
        assert_eq!(consented.tls, SmtpTls::None);
        for host in ["localhost", "127.0.0.2", "::1"] {
            let config = load(&[(HOST, host), base[1], (TLS, "none")]);
            assert!(config.is_ok(), "{host}: {config:?}");
        }
        let message = error(
            &[base[0], base[1], (ALLOW_PLAINTEXT, "true")],
            ALLOW_PLAINTEXT,
        );
        assert!(
            message.contains("only with FORMS_SMTP_TLS=none"),
            "{message}"
        );
    }

    #[test]
    fn user_name_and_password_come_together() {
        let base = [(HOST, "smtp.example.com"), (FROM, "forms@example.com")];
        let message = error(&[base[0], base[1], (USERNAME, "forms")], PASSWORD);
        assert!(message.contains("together, or neither"), "{message}");
        let message = error(&[base[0], base[1], (PASSWORD, "hunter2hunter2")], USERNAME);
        assert!(!message.contains("hunter2"), "{message}");
        let config = smtp(&[(USERNAME, "forms"), (PASSWORD, " hunter2 ")]);
        let credentials = config.credentials.expect("both set");
        assert_eq!(credentials.username, "forms");
        // Used exactly as written: a password may begin or end with a space.
        assert_eq!(credentials.password.expose(), " hunter2 ");
    }

    #[test]
    fn the_password_is_never_echoed() {
        let message = error(
            &[
                (HOST, "smtp.example.com"),
                (FROM, "forms@example.com"),
                (USERNAME, "forms"),
                (PASSWORD, "hunter2\nhunter2"),
            ],
            PASSWORD,
        );
        assert!(!message.contains("hunter2"), "{message}");
        assert!(message.contains("control character"), "{message}");
        let message = error(&[(PASSWORD, "hunter2hunter2")], PASSWORD);
        assert!(!message.contains("hunter2"), "{message}");
        let config = smtp(&[(USERNAME, "forms"), (PASSWORD, "hunter2hunter2")]);
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn hosts_are_names_or_addresses() {
        for host in [
            "smtp.example.com",
            "SMTP.Example.com.",
            "10.0.0.5",
            "::1",
            "mail",
        ] {
            assert!(
                load(&[(HOST, host), (FROM, "forms@example.com")]).is_ok(),
                "{host}"
            );
        }
        for host in [
            "smtp.example.com:587",
            "[::1]",
            "smtp://smtp.example.com",
            "smtp example.com",
            "bücher.example",
            "-bad.example.com",
        ] {
            let message = error(&[(HOST, host), (FROM, "forms@example.com")], HOST);
            assert!(message.contains("not a host name"), "{host}: {message}");
        }
    }

    #[test]
    fn every_smtp_variable_without_the_host_is_named() {
        let errors = load(&[
            (PORT, "2525"),
            (TLS, "tls"),
            (FROM, "forms@example.com"),
            (TIMEOUT, "5"),
        ])
        .expect_err("no host")
        .0;
        let names: Vec<_> = errors.iter().map(|e| e.variable).collect();
        assert_eq!(names, [PORT, TLS, FROM, TIMEOUT]);
        assert!(errors.iter().all(|e| e.problem.contains("FORMS_SMTP_HOST")));
    }

    #[test]
    fn a_ca_file_replaces_the_mozilla_roots() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().expect("key");
        let ca = params.self_signed(&key).expect("certificate");
        let ca_path = dir.path().join("ca.pem");
        std::fs::write(&ca_path, ca.pem()).expect("write");
        let ca_path = ca_path.to_string_lossy().into_owned();
        let config = smtp(&[(CA_FILE, ca_path.as_str())]);
        let roots = config.ca_certificates.expect("read");
        assert_eq!(roots.certificates.len(), 1);

        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").expect("write");
        let empty = empty.to_string_lossy().into_owned();
        let message = error(
            &[
                (HOST, "smtp.example.com"),
                (FROM, "forms@example.com"),
                (CA_FILE, &empty),
            ],
            CA_FILE,
        );
        assert!(message.contains("0 certificates"), "{message}");
    }
}
