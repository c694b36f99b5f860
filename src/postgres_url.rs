//! A PostgreSQL connection URL as libpq reads it, split into what tokio-postgres takes and
//! the TLS that libpq's `sslmode` and `sslrootcert` parameters ask for, through rustls (no
//! OpenSSL on the machine). Below both the configuration, which checks the URL at start-up,
//! and the pool, which connects with it.
//!
//! | `sslmode` | encrypted | server certificate checked | host name checked |
//! | --- | --- | --- | --- |
//! | `disable` | never | no | no |
//! | `prefer` (the default, as in libpq) | when the server offers it | no | no |
//! | `require` | always | no (yes, against `sslrootcert`, when one is given, as libpq does) | no |
//! | `verify-ca` | always | yes | no |
//! | `verify-full` | always | yes | yes |
//!
//! `sslrootcert` is a PEM file of the certificate authorities to trust; without it the
//! checked modes trust the Mozilla root store built into the binary (`webpki-roots`), which
//! is what managed services with public certificates need. `sslrootcert=system` means the
//! same. Client certificates (`sslcert`, `sslkey`) are not supported and are refused.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, String> {
        match value {
            "disable" => Ok(SslMode::Disable),
            "prefer" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-ca" => Ok(SslMode::VerifyCa),
            "verify-full" => Ok(SslMode::VerifyFull),
            // `allow` tries without TLS first; nothing here needs that order.
            other => Err(format!(
                "sslmode={other:?} is not one of disable, prefer, require, verify-ca, verify-full"
            )),
        }
    }
}

/// A database URL split into what tokio-postgres reads and what this module does.
pub struct Target {
    /// One configuration per host, in the URL's order: a connection tries them in turn,
    /// each within a deadline of its own (tokio-postgres, given them all, would spend one
    /// deadline on every host together).
    pub hosts: Vec<tokio_postgres::Config>,
    pub tls: Tls,
}

/// How connections are secured.
#[derive(Clone)]
pub enum Tls {
    Off,
    Rustls(MakeRustlsConnect),
}

/// Parses a `postgres://` URL as libpq does, with several hosts if it names them (the
/// form pg_auto_failover and managed services print: `postgres://u:p@h1:5432,h2:5433/db?
/// target_session_attrs=read-write`, or `?host=h1,h2&port=5432,5433`), or libpq's
/// keyword/value form (`host=h1,h2 port=5432,5433 dbname=db target_session_attrs=
/// read-write`), and libpq's TLS parameters. Errors describe the problem without
/// repeating the value (it may hold a password).
pub fn parse(url: &str) -> Result<Target, String> {
    let parts = if is_url(url) {
        Parts::split(url)?
    } else {
        Parts::keywords(url)?
    };
    let mut mode = SslMode::Prefer;
    let mut root_cert: Option<PathBuf> = None;
    let mut kept: Vec<(String, String)> = Vec::new();
    let mut query_hosts: Option<Vec<String>> = None;
    let mut query_ports: Option<Vec<String>> = None;
    let mut query_addrs: Option<Vec<String>> = None;
    for (name, value) in &parts.query {
        match name.as_str() {
            "sslmode" => mode = SslMode::parse(value)?,
            "sslrootcert" if value == "system" => root_cert = None,
            "sslrootcert" => root_cert = Some(PathBuf::from(value)),
            "sslcert" | "sslkey" | "sslpassword" => {
                return Err(format!(
                    "{name} is not supported: client certificates cannot be used"
                ))
            }
            // libpq: a parameter in the query string overrides the URL's own part.
            "host" => query_hosts = Some(list(value)),
            "port" => query_ports = Some(list(value)),
            "hostaddr" => query_addrs = Some(list(value)),
            "user" | "password" | "dbname" => {
                return Err(format!(
                    "{name} belongs in the URL itself, not in its query string"
                ))
            }
            _ => kept.push((name.clone(), value.clone())),
        }
    }
    let (hosts, mut ports): (Vec<String>, Vec<String>) = match query_hosts {
        Some(hosts) => (hosts, Vec::new()),
        None => parts.hosts.into_iter().unzip(),
    };
    if let Some(query_ports) = query_ports {
        ports = query_ports;
    }
    let addrs = query_addrs.unwrap_or_default();
    if hosts.is_empty() {
        return Err("the URL names no host".into());
    }
    if hosts.iter().any(String::is_empty) {
        return Err("the URL's host list has an empty entry".into());
    }
    // libpq: one port for every host, or one per host.
    let port_of = |index: usize| -> Result<String, String> {
        let port = match ports.len() {
            0 => "",
            1 => ports[0].as_str(),
            n if n == hosts.len() => ports[index].as_str(),
            n => {
                return Err(format!(
                    "the URL names {} hosts and {n} ports: give one port, or one per host",
                    hosts.len()
                ))
            }
        };
        let port = if port.is_empty() { "5432" } else { port };
        match port.parse::<u16>() {
            Ok(number) if number > 0 => Ok(number.to_string()),
            _ => Err(format!("{port:?} is not a port number")),
        }
    };
    if !addrs.is_empty() && addrs.len() != hosts.len() {
        return Err(format!(
            "the URL names {} hosts and {} hostaddr values: give one per host",
            hosts.len(),
            addrs.len()
        ));
    }
    // libpq: `require` with a root certificate checks the chain, like `verify-ca`.
    if mode == SslMode::Require && root_cert.is_some() {
        mode = SslMode::VerifyCa;
    }
    let wire_mode = match mode {
        SslMode::Disable => WireMode::Disable,
        SslMode::Prefer => WireMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
    };
    let mut configs = Vec::with_capacity(hosts.len());
    for (index, host) in hosts.iter().enumerate() {
        let mut fields: Vec<(&str, &str)> = Vec::new();
        let port = port_of(index)?;
        fields.push(("host", host));
        fields.push(("port", &port));
        if let Some(addr) = addrs.get(index) {
            fields.push(("hostaddr", addr));
        }
        if let Some(user) = &parts.user {
            fields.push(("user", user));
        }
        if let Some(password) = &parts.password {
            fields.push(("password", password));
        }
        if let Some(dbname) = &parts.dbname {
            fields.push(("dbname", dbname));
        }
        fields.extend(
            kept.iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        );
        let conninfo = fields
            .iter()
            .map(|(name, value)| {
                format!(
                    "{name}='{}'",
                    value.replace('\\', "\\\\").replace('\'', "\\'")
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        // tokio-postgres names the parameter (in the error's source), never its value.
        let mut config: tokio_postgres::Config = conninfo.parse().map_err(|error| {
            let cause = std::error::Error::source(&error)
                .map(|source| format!(": {source}"))
                .unwrap_or_default();
            format!("the value is not a valid PostgreSQL connection URL{cause}")
        })?;
        config.ssl_mode(wire_mode);
        configs.push(config);
    }
    let tls = match mode {
        SslMode::Disable => Tls::Off,
        _ => Tls::Rustls(MakeRustlsConnect::new(client_config(mode, root_cert)?)),
    };
    Ok(Target {
        hosts: configs,
        tls,
    })
}

/// Whether `value` is a URL rather than libpq's keyword/value form.
pub fn is_url(value: &str) -> bool {
    value.starts_with("postgres://") || value.starts_with("postgresql://")
}

/// A comma-separated list of a query parameter (`host=a,b`).
fn list(value: &str) -> Vec<String> {
    value.split(',').map(str::to_string).collect()
}

/// A URL cut where libpq cuts it, each part percent-decoded.
struct Parts {
    user: Option<String>,
    password: Option<String>,
    /// Host and port (empty: the default) of each entry of the host list.
    hosts: Vec<(String, String)>,
    dbname: Option<String>,
    query: Vec<(String, String)>,
}

impl Parts {
    fn split(url: &str) -> Result<Parts, String> {
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or("the value does not start with postgres:// or postgresql://")?;
        // libpq: the credentials end at the first `@` before the path.
        let (credentials, rest) = match rest.find(['@', '/']) {
            Some(at) if rest.as_bytes()[at] == b'@' => (Some(&rest[..at]), &rest[at + 1..]),
            _ => (None, rest),
        };
        let (user, password) = match credentials {
            None => (None, None),
            Some(credentials) => match credentials.split_once(':') {
                Some((user, password)) => (
                    Some(decode(user, "the user name")?),
                    Some(decode(password, "the password")?),
                ),
                None => (Some(decode(credentials, "the user name")?), None),
            },
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, rest) = rest.split_at(end);
        let mut hosts = Vec::new();
        if !authority.is_empty() {
            for entry in authority.split(',') {
                hosts.push(host_and_port(entry)?);
            }
        }
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        let dbname = match path.strip_prefix('/') {
            Some("") | None => None,
            Some(name) => Some(decode(name, "the database name")?),
        };
        let mut pairs = Vec::new();
        for pair in query
            .unwrap_or("")
            .split('&')
            .filter(|pair| !pair.is_empty())
        {
            let (name, value) = pair.split_once('=').ok_or("a query parameter has no `=`")?;
            let name = decode(name, "a query parameter's name")?;
            let value = decode(value, &format!("the value of {name}"))?;
            pairs.push((name, value));
        }
        Ok(Parts {
            user,
            password,
            hosts,
            dbname,
            query: pairs,
        })
    }
}

impl Parts {
    /// libpq's keyword/value form: `keyword = value` pairs separated by white space, a
    /// value in single quotes when it holds spaces, `\'` and `\\` escaping a quote and a
    /// backslash. `host`, `port` and `hostaddr` take lists as in a URL's query string.
    fn keywords(conninfo: &str) -> Result<Parts, String> {
        let mut parts = Parts {
            user: None,
            password: None,
            hosts: Vec::new(),
            dbname: None,
            query: Vec::new(),
        };
        let mut chars = conninfo.chars().peekable();
        loop {
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            if chars.peek().is_none() {
                break;
            }
            let mut name = String::new();
            while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
                name.push(c);
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            if chars.next() != Some('=') {
                // Not the text itself: it may be a password written in the wrong place.
                return Err(
                    "the value is neither a postgres:// URL nor keyword=value pairs (a word has no `=`)"
                        .into(),
                );
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            let mut value = String::new();
            if chars.next_if_eq(&'\'').is_some() {
                loop {
                    match chars.next() {
                        None => return Err(format!("the value of {name} has no closing quote")),
                        Some('\'') => break,
                        Some('\\') => match chars.next() {
                            Some(escaped) => value.push(escaped),
                            None => return Err(format!("the value of {name} ends in a backslash")),
                        },
                        Some(c) => value.push(c),
                    }
                }
            } else {
                while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                    if c == '\\' {
                        match chars.next() {
                            Some(escaped) => value.push(escaped),
                            None => return Err(format!("the value of {name} ends in a backslash")),
                        }
                    } else {
                        value.push(c);
                    }
                }
            }
            match name.as_str() {
                "user" => parts.user = Some(value),
                "password" => parts.password = Some(value),
                "dbname" => parts.dbname = Some(value),
                _ => parts.query.push((name, value)),
            }
        }
        Ok(parts)
    }
}

/// One entry of the host list: `host`, `host:port`, `[v6]` or `[v6]:port`.
fn host_and_port(entry: &str) -> Result<(String, String), String> {
    let (host, port) = if let Some(bracketed) = entry.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or("an IPv6 address in the host list has no closing `]`")?;
        let port = match after {
            "" => "",
            after => after
                .strip_prefix(':')
                .ok_or("unexpected characters after an IPv6 address in the host list")?,
        };
        (host, port)
    } else {
        entry.split_once(':').unwrap_or((entry, ""))
    };
    if host.is_empty() {
        return Err("the URL's host list has an empty entry".into());
    }
    Ok((decode(host, "a host name")?, decode(port, "a port")?))
}

fn decode(text: &str, what: &str) -> Result<String, String> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| format!("{what} is not valid UTF-8 once percent-decoded"))
}

fn client_config(
    mode: SslMode,
    root_cert: Option<PathBuf>,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("cannot set up TLS: {error}"))?;
    let chain = match mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => None,
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let roots = Arc::new(root_store(root_cert)?);
            Some(
                WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|error| format!("cannot use the certificate authorities: {error}"))?,
            )
        }
    };
    let verifier = Arc::new(Verifier {
        provider,
        chain,
        check_name: mode == SslMode::VerifyFull,
    });
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

fn root_store(root_cert: Option<PathBuf>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match root_cert {
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            let certificates = CertificateDer::pem_file_iter(&path)
                .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
                .map_err(|error| {
                    format!(
                        "sslrootcert {} cannot be read as PEM: {error}",
                        path.display()
                    )
                })?;
            let (added, _) = roots.add_parsable_certificates(certificates);
            if added == 0 {
                return Err(format!(
                    "sslrootcert {} holds no usable certificate",
                    path.display()
                ));
            }
        }
    }
    Ok(roots)
}

/// What each mode checks of the server's certificate. Without a chain to check (`prefer`,
/// `require`: libpq's meaning) the session is encrypted and bound to the certificate the
/// server presented, whoever signed it; with one (`verify-ca`) the certificate must chain to
/// a trusted authority; `verify-full` also wants the URL's host in it. The handshake's
/// signatures are verified in every mode.
#[derive(Debug)]
struct Verifier {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(url: &str) -> Result<(WireMode, bool), String> {
        let target = parse(url)?;
        Ok((
            target.hosts[0].get_ssl_mode(),
            matches!(target.tls, Tls::Rustls(_)),
        ))
    }

    #[test]
    fn modes_map_to_the_wire_and_a_connector() {
        let base = "postgres://u:p@db.example.com:5432/forms";
        assert_eq!(mode_of(base).unwrap(), (WireMode::Prefer, true));
        assert_eq!(
            mode_of(&format!("{base}?sslmode=disable")).unwrap(),
            (WireMode::Disable, false)
        );
        assert_eq!(
            mode_of(&format!("{base}?sslmode=require")).unwrap(),
            (WireMode::Require, true)
        );
        assert_eq!(
            mode_of(&format!("{base}?sslmode=verify-ca")).unwrap(),
            (WireMode::Require, true)
        );
        assert_eq!(
            mode_of(&format!("{base}?sslmode=verify-full&application_name=x")).unwrap(),
            (WireMode::Require, true)
        );
    }

    #[test]
    fn unknown_modes_and_client_certificates_are_refused_without_the_url() {
        let error = parse("postgres://u:hunter2@h/db?sslmode=verify")
            .err()
            .unwrap();
        assert!(error.contains("not one of"), "{error}");
        assert!(!error.contains("hunter2"));
        let error = parse("postgres://u:p@h/db?sslcert=/c.pem").err().unwrap();
        assert!(error.contains("not supported"), "{error}");
        let error = parse("postgres://u:p@h/db?sslmode=verify-full&sslrootcert=/nonexistent.pem")
            .err()
            .unwrap();
        assert!(error.contains("/nonexistent.pem"), "{error}");
    }

    use tokio_postgres::config::{Host, TargetSessionAttrs};

    /// Each host's `host:port`, in order.
    fn hosts(url: &str) -> Vec<String> {
        parse(url)
            .unwrap()
            .hosts
            .iter()
            .map(|config| {
                assert_eq!(config.get_hosts().len(), 1);
                assert_eq!(config.get_ports().len(), 1);
                let host = match &config.get_hosts()[0] {
                    Host::Tcp(name) => name.clone(),
                    Host::Unix(path) => path.display().to_string(),
                };
                format!("{host}/{}", config.get_ports()[0])
            })
            .collect()
    }

    #[test]
    fn several_hosts_in_the_forms_libpq_and_pg_auto_failover_print() {
        // pg_autoctl show uri
        let url = "postgres://autoctl_node@10.0.0.1:5432,10.0.0.2:5433/forms?target_session_attrs=read-write&sslmode=prefer";
        assert_eq!(hosts(url), ["10.0.0.1/5432", "10.0.0.2/5433"]);
        let target = parse(url).unwrap();
        for config in &target.hosts {
            assert_eq!(config.get_dbname(), Some("forms"));
            assert_eq!(config.get_user(), Some("autoctl_node"));
            assert_eq!(
                config.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite
            );
            assert_eq!(config.get_ssl_mode(), WireMode::Prefer);
        }
        // Default ports, IPv6, a port for one host only.
        assert_eq!(
            hosts("postgres://u@a,[::1]:6543,[fe80::1],b:7/db"),
            ["a/5432", "::1/6543", "fe80::1/5432", "b/7"]
        );
        // Host and port lists as query parameters, one port for all or one per host.
        assert_eq!(
            hosts("postgresql:///db?host=a,b&port=5433"),
            ["a/5433", "b/5433"]
        );
        assert_eq!(hosts("postgres://u@/db?host=a,b&port=1,2"), ["a/1", "b/2"]);
        // The query's list overrides the URL's.
        assert_eq!(hosts("postgres://x:9/db?host=a,b"), ["a/5432", "b/5432"]);
        assert_eq!(hosts("postgres://x,y/db?port=6,7"), ["x/6", "y/7"]);
        // A socket directory.
        assert_eq!(
            hosts("postgres:///db?host=%2Fvar%2Frun%2Fpostgresql"),
            ["/var/run/postgresql/5432"]
        );
        let one = parse("postgres://u@h/db?hostaddr=127.0.0.1").unwrap();
        assert_eq!(one.hosts[0].get_hostaddrs().len(), 1);
    }

    #[test]
    fn several_hosts_in_libpqs_keyword_value_form() {
        let conninfo = r"host=10.0.0.1,10.0.0.2 port=5432,5433 dbname=forms user=app password='it\'s \\ secret' target_session_attrs=read-write";
        assert_eq!(hosts(conninfo), ["10.0.0.1/5432", "10.0.0.2/5433"]);
        let target = parse(conninfo).unwrap();
        for config in &target.hosts {
            assert_eq!(config.get_dbname(), Some("forms"));
            assert_eq!(config.get_user(), Some("app"));
            assert_eq!(config.get_password(), Some(&b"it's \\ secret"[..]));
            assert_eq!(
                config.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite
            );
        }
        // Spaces around `=`, one port for both, a default port.
        assert_eq!(
            hosts("host = a,b port = 6000 dbname=x"),
            ["a/6000", "b/6000"]
        );
        assert_eq!(hosts("host=a dbname=x"), ["a/5432"]);
        for (bad, problem) in [
            ("host=a password='unclosed", "no closing quote"),
            ("host=a password", "has no `=`"),
            ("dbname=x", "names no host"),
            ("host=a,b port=1,2,3", "3 ports"),
        ] {
            let error = parse(bad).err().unwrap();
            assert!(error.contains(problem), "{bad}: {error}");
            assert!(!error.contains("unclosed"), "{error}");
        }
    }

    #[test]
    fn passwords_with_special_characters_are_decoded_and_kept_whole() {
        let target = parse(
            "postgres://me%40home:p%40ss%3Aw%2Fo'rd%5C%20x@h1,h2/my%20db?application_name=a%26b",
        )
        .unwrap();
        for config in &target.hosts {
            assert_eq!(config.get_user(), Some("me@home"));
            assert_eq!(config.get_password(), Some(&b"p@ss:w/o'rd\\ x"[..]));
            assert_eq!(config.get_dbname(), Some("my db"));
            assert_eq!(config.get_application_name(), Some("a&b"));
        }
        // A raw `+` stays a `+`, as in libpq (not a space, as in HTML forms).
        let target = parse("postgres://u:a+b@h/db").unwrap();
        assert_eq!(target.hosts[0].get_password(), Some(&b"a+b"[..]));
    }

    #[test]
    fn garbage_is_refused_with_a_clear_error_that_never_holds_the_password() {
        let cases = [
            ("mysql://u:hunter2@h/db", "neither a postgres:// URL"),
            ("host=h password='hunter2", "no closing quote"),
            ("hunter2 host=h", "a word has no"),
            ("postgres://u:hunter2@/db", "names no host"),
            ("postgres://u:hunter2@a,,b/db", "empty entry"),
            ("postgres://u:hunter2@[::1/db", "closing `]`"),
            ("postgres://u:hunter2@[::1]x/db", "after an IPv6 address"),
            ("postgres://u:hunter2@h:notaport/db", "not a port number"),
            ("postgres://u:hunter2@h:70000/db", "not a port number"),
            (
                "postgres://u:hunter2@a,b,c/db?port=1,2",
                "3 hosts and 2 ports",
            ),
            ("postgres://u:hunter2@a,b/db?hostaddr=127.0.0.1", "hostaddr"),
            ("postgres://u:hunter2@h/db?nonsense=1", "nonsense"),
            (
                "postgres://u:hunter2@h/db?target_session_attrs=primary",
                "target_session_attrs",
            ),
            ("postgres://u:hunter2@h/db?sslmode", "no `=`"),
            (
                "postgres://u:hunter2@h/db?password=x",
                "not in its query string",
            ),
            ("postgres://u:hunter2%ff@h/db", "UTF-8"),
        ];
        for (url, expected) in cases {
            let error = parse(url)
                .err()
                .unwrap_or_else(|| panic!("{url} was accepted"));
            assert!(error.contains(expected), "{url}: {error}");
            assert!(!error.contains("hunter2"), "{url}: {error}");
        }
    }
}
