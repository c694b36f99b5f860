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
    pub config: tokio_postgres::Config,
    pub tls: Tls,
}

/// How connections are secured.
#[derive(Clone)]
pub enum Tls {
    Off,
    Rustls(MakeRustlsConnect),
}

/// Parses a `postgres://` URL with libpq's TLS parameters. Errors describe the problem
/// without repeating the URL (it may hold a password).
pub fn parse(url: &str) -> Result<Target, String> {
    let mut parsed =
        url::Url::parse(url).map_err(|_| "the value is not a valid URL".to_string())?;
    let mut mode = SslMode::Prefer;
    let mut root_cert: Option<PathBuf> = None;
    let mut kept: Vec<(String, String)> = Vec::new();
    for (name, value) in parsed.query_pairs() {
        match name.as_ref() {
            "sslmode" => mode = SslMode::parse(&value)?,
            "sslrootcert" if value == "system" => root_cert = None,
            "sslrootcert" => root_cert = Some(PathBuf::from(value.as_ref())),
            "sslcert" | "sslkey" | "sslpassword" => {
                return Err(format!(
                    "{name} is not supported: client certificates cannot be used"
                ))
            }
            _ => kept.push((name.into_owned(), value.into_owned())),
        }
    }
    if kept.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(&kept);
    }
    let mut config: tokio_postgres::Config = parsed
        .as_str()
        .parse()
        .map_err(|_| "the value is not a valid PostgreSQL connection URL".to_string())?;
    // libpq: `require` with a root certificate checks the chain, like `verify-ca`.
    if mode == SslMode::Require && root_cert.is_some() {
        mode = SslMode::VerifyCa;
    }
    let tls = match mode {
        SslMode::Disable => Tls::Off,
        _ => Tls::Rustls(MakeRustlsConnect::new(client_config(mode, root_cert)?)),
    };
    config.ssl_mode(match mode {
        SslMode::Disable => WireMode::Disable,
        SslMode::Prefer => WireMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
    });
    Ok(Target { config, tls })
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
            target.config.get_ssl_mode(),
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
}
