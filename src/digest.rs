//! The two digests the service computes: SHA-256 and HMAC-SHA256, as lowercase hex.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

pub fn hmac_sha256_hex(key: &[u8], data: &[u8]) -> String {
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(data);
            hex::encode(mac.finalize().into_bytes())
        }
        // HMAC accepts keys of every length, so this arm never runs; falling back to a
        // keyed hash of the concatenation keeps the function total without a panic.
        Err(_) => sha256_hex(&[key, data].concat()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_vectors() {
        assert_eq!(
            super::sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // RFC 4231 test case 2.
        assert_eq!(
            super::hmac_sha256_hex(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
