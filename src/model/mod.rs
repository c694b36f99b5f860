//! The domain: what a delivery's state, an attempt's outcome and an event's kind can be,
//! the identifiers and their formats, and the rules an endpoint's settings and a form's
//! field names follow. Everything here is plain data and pure functions, shared by intake,
//! the worker, the GraphQL API and the event feed; the database reads and writes these
//! types directly (each maps to its column once, and an unknown stored value is an error).

/// Maps a type with `as_str` and `parse` to a text column, once for every vocabulary and
/// identifier: written as its text, read back through `parse`, and a value `parse` refuses
/// is a read error naming `$what`, never a default.
macro_rules! text_column {
    ($name:ident, $what:literal) => {
        impl diesel::serialize::ToSql<diesel::sql_types::Text, diesel::pg::Pg> for $name {
            fn to_sql<'b>(
                &'b self,
                out: &mut diesel::serialize::Output<'b, '_, diesel::pg::Pg>,
            ) -> diesel::serialize::Result {
                std::io::Write::write_all(out, self.as_str().as_bytes())?;
                Ok(diesel::serialize::IsNull::No)
            }
        }

        impl diesel::deserialize::FromSql<diesel::sql_types::Text, diesel::pg::Pg> for $name {
            fn from_sql(value: diesel::pg::PgValue<'_>) -> diesel::deserialize::Result<Self> {
                let text = std::str::from_utf8(value.as_bytes())?;
                $name::parse(text)
                    .ok_or_else(|| crate::model::UnknownStoredValue::error($what, text))
            }
        }
    };
}

/// Maps a serde type to a `jsonb` column: written as its JSON, read back through serde; a
/// stored document of another shape is a read error naming `$what`, never a default.
macro_rules! json_column {
    ($name:ident, $what:literal) => {
        impl diesel::serialize::ToSql<diesel::sql_types::Jsonb, diesel::pg::Pg> for $name {
            fn to_sql<'b>(
                &'b self,
                out: &mut diesel::serialize::Output<'b, '_, diesel::pg::Pg>,
            ) -> diesel::serialize::Result {
                // jsonb's binary format: a version byte, then the text.
                std::io::Write::write_all(out, &[1])?;
                serde_json::to_writer(out, self)?;
                Ok(diesel::serialize::IsNull::No)
            }
        }

        impl diesel::deserialize::FromSql<diesel::sql_types::Jsonb, diesel::pg::Pg> for $name {
            fn from_sql(value: diesel::pg::PgValue<'_>) -> diesel::deserialize::Result<Self> {
                let json = <serde_json::Value as diesel::deserialize::FromSql<
                    diesel::sql_types::Jsonb,
                    diesel::pg::Pg,
                >>::from_sql(value)?;
                serde_json::from_value(json)
                    .map_err(|_| crate::model::UnknownStoredValue::error($what, "(its shape)"))
            }
        }
    };
}

pub mod client_tls;
pub mod destination;
pub mod endpoint;
pub mod fields;
pub mod files;
pub mod ids;
pub mod patch;
pub mod rate_limit;
pub mod receiver;
pub mod search;
pub mod spam;
pub mod state;
pub mod template;

/// A stored value no variant or format of this build spells: the read fails with this
/// (a vocabulary value or an identifier, never submitted data, so it may be logged).
#[derive(Debug, thiserror::Error)]
#[error("{what} {value:?} in the database is not one this build knows")]
pub struct UnknownStoredValue {
    pub what: &'static str,
    pub value: String,
}

impl UnknownStoredValue {
    fn new(what: &'static str, text: &str) -> UnknownStoredValue {
        // Bounded: a row written by another program could hold anything.
        UnknownStoredValue {
            what,
            value: text.chars().take(80).collect(),
        }
    }

    /// The read error for `text` in a column of `what`.
    pub fn error(what: &'static str, text: &str) -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(UnknownStoredValue::new(what, text))
    }
}
