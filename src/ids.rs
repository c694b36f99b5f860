//! Identifier formats of SPEC section 3: a prefix and a v4 UUID as 32 lowercase hex digits.
//! (Claim tokens are made by the claim statement itself, in PostgreSQL.)

use uuid::Uuid;

fn prefixed(prefix: &str) -> String {
    format!("{prefix}{}", Uuid::new_v4().simple())
}

pub fn submission_id() -> String {
    prefixed("sub_")
}

pub fn delivery_id() -> String {
    prefixed("whd_")
}

pub fn attempt_id() -> String {
    prefixed("att_")
}

pub fn management_key_id() -> String {
    prefixed("mk_")
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats() {
        for (id, prefix) in [
            (super::submission_id(), "sub_"),
            (super::delivery_id(), "whd_"),
            (super::attempt_id(), "att_"),
            (super::management_key_id(), "mk_"),
        ] {
            let rest = id.strip_prefix(prefix).expect("prefix");
            assert_eq!(rest.len(), 32);
            assert!(rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        }
    }
}

/// Endpoint ids (chosen by operators): 3–64 characters of `a-z`, `0-9`, `-`, `_`, starting
/// and ending with a letter or digit.
pub fn is_valid_endpoint_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (3..=64).contains(&bytes.len())
        && bytes.iter().all(|b| edge(b) || *b == b'-' || *b == b'_')
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
}

#[cfg(test)]
mod endpoint_id_tests {
    #[test]
    fn endpoint_ids() {
        for good in ["abc", "contact-form", "a_b", "0x1", &"a".repeat(64)] {
            assert!(super::is_valid_endpoint_id(good), "{good}");
        }
        for bad in [
            "ab",
            "-abc",
            "abc-",
            "_abc",
            "Abc",
            "a b",
            "abé",
            "a.b",
            &"a".repeat(65),
            "",
        ] {
            assert!(!super::is_valid_endpoint_id(bad), "{bad}");
        }
    }
}
