//! Identifiers as types of their own: a submission id cannot be passed where a delivery id
//! is wanted, and every id read from the database or a client is checked once, when it
//! becomes one of these.
//!
//! Generated ids are a prefix and a v4 UUID as 32 lowercase hex digits (`sub_`, `whd_`,
//! `att_`, `mk_`; claim tokens `clm_` are minted by the claim statement itself). Endpoint
//! ids are chosen by operators: 3–64 characters of `a-z`, `0-9`, `-`, `_`, starting and
//! ending with a letter or digit.

/// Defines an identifier type stored as text, checked by `$valid` whenever it is made from
/// text (a client's argument or a database value; a stored value that fails is a read
/// error, not a default).
macro_rules! identifier {
    ($(#[$meta:meta])* $name:ident, $what:literal, $valid:expr) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord,
            diesel::expression::AsExpression, diesel::deserialize::FromSqlRow, serde::Serialize,
        )]
        #[diesel(sql_type = diesel::sql_types::Text)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id `text` spells, if it has the format.
            pub fn parse(text: &str) -> Option<$name> {
                let valid: fn(&str) -> bool = $valid;
                valid(text).then(|| $name(text.to_string()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        // An id equals the text that spells it (tests and logs compare with literals).
        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        text_column!($name, $what);
    };
}

/// Defines a generated identifier: `$prefix` and 32 lowercase hex digits, from a random
/// UUID (version 4), or with `time_ordered` from a UUID of version 7: 48 bits of the
/// Unix time in milliseconds, then 74 random bits. The ids of the rows written on every
/// submission and every delivery attempt are time-ordered, so that their unique indexes
/// (and the indexes that refer to them) grow at their right edge, as a sequence's would,
/// instead of touching a random page of a large index on every insert. The time they
/// show is no secret (the receipt and the webhook carry it too); a claim token, which
/// is a fence, stays wholly random.
macro_rules! prefixed_id {
    ($(#[$meta:meta])* $name:ident = $prefix:literal, $what:literal) => {
        prefixed_id!($(#[$meta])* $name = $prefix, $what, uuid::Uuid::new_v4);
    };
    ($(#[$meta:meta])* $name:ident = $prefix:literal, $what:literal, time_ordered) => {
        prefixed_id!($(#[$meta])* $name = $prefix, $what, uuid::Uuid::now_v7);
    };
    ($(#[$meta:meta])* $name:ident = $prefix:literal, $what:literal, $uuid:path) => {
        identifier!($(#[$meta])* $name, $what, |text| is_prefixed(text, $prefix));

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A new id.
            #[allow(dead_code)]
            pub fn generate() -> $name {
                $name(format!("{}{}", $prefix, $uuid().simple()))
            }
        }
    };
}

fn is_prefixed(text: &str, prefix: &str) -> bool {
    text.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == 32
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

prefixed_id!(
    /// `sub_…`: a stored submission.
    SubmissionId = "sub_", "submission id", time_ordered
);
prefixed_id!(
    /// `whd_…`: a delivery (one per submission and destination of its endpoint).
    DeliveryId = "whd_", "delivery id", time_ordered
);
prefixed_id!(
    /// `att_…`: one request of a delivery.
    AttemptId = "att_", "attempt id", time_ordered
);
prefixed_id!(
    /// `fil_…`: an uploaded file (its row is written before its bytes).
    FileId = "fil_", "file id", time_ordered
);
prefixed_id!(
    /// `clm_…`: the token a claim wrote onto its delivery (the fence).
    ClaimToken = "clm_", "claim token"
);
prefixed_id!(
    /// `dst_…`: one of an endpoint's destinations (a webhook or an email address list).
    DestinationId = "dst_", "destination id"
);
prefixed_id!(
    /// `mk_…`: a management API key's id (never the key).
    KeyId = "mk_", "management key id"
);

prefixed_id!(
    /// `prj_…`: a project, a team's endpoints and the keys that may see them.
    ProjectId = "prj_", "project id"
);

impl ProjectId {
    /// The project every endpoint and key made before projects existed moved into
    /// (migration projects); where an endpoint created without a project goes.
    pub fn default_project() -> ProjectId {
        ProjectId(format!("{}{}", Self::PREFIX, "0".repeat(32)))
    }
}

identifier!(
    /// An endpoint's id, chosen by its operator.
    EndpointId, "endpoint id", is_valid_endpoint_id
);

/// 3–64 characters of `a-z`, `0-9`, `-`, `_`, starting and ending with a letter or digit.
fn is_valid_endpoint_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (3..=64).contains(&bytes.len())
        && bytes.iter().all(|b| edge(b) || *b == b'-' || *b == b'_')
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_have_their_prefix_and_32_hex_digits() {
        for (id, prefix) in [
            (SubmissionId::generate().into_string(), "sub_"),
            (DeliveryId::generate().into_string(), "whd_"),
            (AttemptId::generate().into_string(), "att_"),
            (KeyId::generate().into_string(), "mk_"),
            (ProjectId::generate().into_string(), "prj_"),
            (ProjectId::default_project().into_string(), "prj_"),
        ] {
            let rest = id.strip_prefix(prefix).expect("prefix");
            assert_eq!(rest.len(), 32);
            assert!(rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        }
    }

    /// The ids written in volume grow with time, so their indexes grow at the right edge;
    /// a claim token stays wholly random (a version 4 UUID).
    #[test]
    fn row_ids_are_time_ordered_and_claim_tokens_random() {
        let earlier = [
            SubmissionId::generate().into_string(),
            DeliveryId::generate().into_string(),
            AttemptId::generate().into_string(),
        ];
        std::thread::sleep(std::time::Duration::from_millis(2));
        let later = [
            SubmissionId::generate().into_string(),
            DeliveryId::generate().into_string(),
            AttemptId::generate().into_string(),
        ];
        for (earlier, later) in earlier.iter().zip(&later) {
            assert!(earlier < later, "{earlier} {later}");
            // The version digit: the 13th of the 32.
            assert_eq!(&later[later.len() - 20..later.len() - 19], "7", "{later}");
        }
        let token = ClaimToken::generate().into_string();
        assert_eq!(&token[token.len() - 20..token.len() - 19], "4", "{token}");
    }

    #[test]
    fn ids_of_one_kind_are_not_ids_of_another() {
        let submission = SubmissionId::generate();
        assert!(SubmissionId::parse(submission.as_str()).is_some());
        assert!(DeliveryId::parse(submission.as_str()).is_none());
        assert!(SubmissionId::parse("sub_ABCDEF0123456789abcdef0123456789").is_none());
        assert!(SubmissionId::parse("sub_0123").is_none());
        assert!(ClaimToken::parse(&format!("clm_{}", "0".repeat(32))).is_some());
    }

    #[test]
    fn endpoint_ids() {
        for good in ["abc", "contact-form", "a_b", "0x1", &"a".repeat(64)] {
            assert!(EndpointId::parse(good).is_some(), "{good}");
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
            assert!(EndpointId::parse(bad).is_none(), "{bad}");
        }
    }
}
