//! A webhook's TLS settings beyond the public roots (docs/delivery.md, "Client
//! certificates (mTLS)"): a client certificate with its private key, presented to
//! receivers that ask for one, and an extra CA (PEM) its receiver's certificate may chain
//! to. Checked here when an operator sets them, so that a delivery never meets a
//! certificate it cannot use; the key is write-only (never answered, logged or recorded).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

use super::endpoint::{Setting, SettingError};

/// The longest PEM text stored (a column CHECK holds the same bound): room for a chain of
/// several certificates with large keys.
pub const MAX_PEM_LENGTH: usize = 65_536;
/// A certificate chain or a CA bundle holds at most this many certificates.
const MAX_CERTIFICATES: usize = 10;

fn invalid(setting: Setting, reason: &'static str) -> SettingError {
    SettingError::Invalid { setting, reason }
}

/// The certificates of a PEM text: 1–10 `CERTIFICATE` blocks and nothing unreadable.
fn certificates(pem: &str, setting: Setting) -> Result<Vec<CertificateDer<'static>>, SettingError> {
    if pem.len() > MAX_PEM_LENGTH {
        return Err(invalid(
            setting,
            "a PEM text must be at most 65536 characters",
        ));
    }
    let certificates = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| invalid(setting, "not a readable PEM text of certificates"))?;
    if certificates.is_empty() || certificates.len() > MAX_CERTIFICATES {
        return Err(invalid(
            setting,
            "a PEM text must hold 1 to 10 CERTIFICATE blocks",
        ));
    }
    Ok(certificates)
}

/// A client certificate (its chain, leaf first) and its private key, both PEM, stored
/// trimmed: the certificate must parse, the key (PKCS#8, PKCS#1 or SEC1; RSA, ECDSA or
/// Ed25519) must be one TLS can sign with, and it must be the certificate's own key.
pub fn client_identity(certificate: &str, key: &str) -> Result<(String, String), SettingError> {
    let chain = certificates(certificate, Setting::ClientCertificate)?;
    if key.len() > MAX_PEM_LENGTH {
        return Err(invalid(
            Setting::ClientKey,
            "a PEM text must be at most 65536 characters",
        ));
    }
    let private = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|_| {
        invalid(
            Setting::ClientKey,
            "not a readable PEM private key (PKCS#8, PKCS#1 or SEC1)",
        )
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(private)
        .map_err(|_| {
            invalid(
                Setting::ClientKey,
                "a key TLS cannot sign with (RSA, ECDSA P-256/P-384 or Ed25519)",
            )
        })?;
    let certified = rustls::sign::CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(invalid(
                Setting::ClientKey,
                "the key is not the certificate's own (their public keys differ)",
            ))
        }
        // An unreadable leaf, or a key whose public half cannot be compared: refused
        // rather than stored unchecked.
        Err(_) => {
            return Err(invalid(
                Setting::ClientCertificate,
                "the certificate cannot be checked against its key (an unreadable certificate)",
            ))
        }
    }
    Ok((certificate.trim().to_string(), key.trim().to_string()))
}

/// An extra CA bundle (PEM, 1–10 certificates), each usable as a trust anchor; stored
/// trimmed.
pub fn client_ca(pem: &str) -> Result<String, SettingError> {
    let certificates = certificates(pem, Setting::ClientCa)?;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in certificates {
        roots.add(certificate).map_err(|_| {
            invalid(
                Setting::ClientCa,
                "a certificate that cannot be a trust anchor",
            )
        })?;
    }
    Ok(pem.trim().to_string())
}

/// The SHA-256 fingerprint of a stored chain's leaf, as `AB:CD:…`; `None` when it does not
/// parse (it was checked when set).
pub fn fingerprint(certificate: &str) -> Option<String> {
    let leaf = CertificateDer::pem_slice_iter(certificate.as_bytes())
        .next()?
        .ok()?;
    let digest = Sha256::digest(leaf.as_ref());
    Some(
        digest
            .iter()
            .map(|byte| format!("{byte:02X}"))
            .collect::<Vec<_>>()
            .join(":"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_refused_with_its_field() {
        let setting = |result: Result<(String, String), SettingError>| match result {
            Err(SettingError::Invalid { setting, .. }) => Some(setting),
            _ => None,
        };
        assert_eq!(
            setting(client_identity("not pem", "not pem")),
            Some(Setting::ClientCertificate)
        );
        assert_eq!(
            setting(client_identity(
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                "nothing"
            )),
            Some(Setting::ClientKey)
        );
        assert!(client_ca("").is_err());
        assert!(fingerprint("nothing").is_none());
    }
}
