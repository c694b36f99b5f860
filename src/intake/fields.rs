//! The field rules of public intake (docs/intake.md), the honeypot, and the normalised form
//! that is stored, signed and fingerprinted.

use serde_json::{Map, Value};

use crate::config::IntakeConfig;
use crate::error::ApiError;
use crate::model::fields::{name_problem, NameProblem};

/// The rule of a field's name (a file part's too).
pub fn check_name(name: &str, limits: &IntakeConfig) -> Result<(), ApiError> {
    match name_problem(name, limits.max_field_name_length) {
        None => Ok(()),
        Some(NameProblem::Empty | NameProblem::ControlCharacter) => Err(ApiError::InvalidFieldName),
        Some(NameProblem::TooLong { length }) => Err(ApiError::FieldNameTooLong {
            limit: limits.max_field_name_length,
            received: length,
        }),
    }
}

/// Applies the rules in the specified order: the value count first, then pair by pair
/// (name before value), then emptiness.
pub fn check_rules(pairs: &[(String, String)], limits: &IntakeConfig) -> Result<(), ApiError> {
    if pairs.len() > limits.max_fields {
        return Err(ApiError::TooManyFields {
            limit: limits.max_fields,
            received: pairs.len(),
        });
    }
    for (name, value) in pairs {
        check_name(name, limits)?;
        let value_length = value.chars().count();
        if value_length > limits.max_field_value_length {
            return Err(ApiError::FieldValueTooLong {
                field: name.clone(),
                limit: limits.max_field_value_length,
                received: value_length,
            });
        }
        if value.contains('\0') {
            return Err(ApiError::InvalidFieldValue {
                field: name.clone(),
            });
        }
    }
    if pairs.is_empty() {
        return Err(ApiError::EmptySubmission);
    }
    Ok(())
}

/// What the honeypot says about a submission.
#[derive(Debug, PartialEq, Eq)]
pub enum Honeypot {
    /// The honeypot field was filled in: a bot. Answer as a success, store nothing.
    Tripped,
    /// Not tripped; any empty honeypot values have been removed from the pairs.
    Clear,
}

pub fn apply_honeypot(pairs: &mut Vec<(String, String)>, honeypot_field: Option<&str>) -> Honeypot {
    let Some(honeypot) = honeypot_field else {
        return Honeypot::Clear;
    };
    if pairs
        .iter()
        .any(|(name, value)| name == honeypot && !value.is_empty())
    {
        return Honeypot::Tripped;
    }
    pairs.retain(|(name, _)| name != honeypot);
    Honeypot::Clear
}

/// Name → values, names in order of first appearance, values in submission order.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalisedFields {
    fields: Map<String, Value>,
    value_count: usize,
}

impl NormalisedFields {
    pub fn from_pairs(pairs: Vec<(String, String)>) -> Self {
        let value_count = pairs.len();
        let mut fields = Map::new();
        for (name, value) in pairs {
            if let Value::Array(values) = fields
                .entry(name)
                .or_insert_with(|| Value::Array(Vec::new()))
            {
                values.push(Value::String(value));
            }
        }
        NormalisedFields {
            fields,
            value_count,
        }
    }

    /// The stored `fields` JSON, `{"name": ["value", …], …}`, key order kept.
    pub fn to_json(&self) -> Value {
        Value::Object(self.fields.clone())
    }

    pub fn value_count(&self) -> usize {
        self.value_count
    }

    /// Hex SHA-256 of the compact JSON `[[name,[values…]],…]`, non-ASCII unescaped
    /// (docs/intake.md), the idempotency fingerprint.
    pub fn fingerprint(&self) -> String {
        let list: Vec<(&String, &Value)> = self.fields.iter().collect();
        // Names and JSON values serialise without fail; an empty fingerprint would make
        // different payloads look the same.
        let canonical = serde_json::to_vec(&list).expect("field names and values serialise");
        crate::digest::sha256_hex(&canonical)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> IntakeConfig {
        IntakeConfig {
            max_body_bytes: 1000,
            max_fields: 3,
            max_field_name_length: 5,
            max_field_value_length: 4,
            endpoint_cache_max_age: std::time::Duration::from_secs(2),
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn rules_in_order() {
        let l = limits();
        assert!(check_rules(&pairs(&[("a", "1"), ("b", "22")]), &l).is_ok());
        assert!(matches!(
            check_rules(&pairs(&[("", "x"), ("a", "1"), ("b", "2"), ("c", "3")]), &l),
            Err(ApiError::TooManyFields {
                limit: 3,
                received: 4
            })
        ));
        assert!(matches!(
            check_rules(&pairs(&[("", "x")]), &l),
            Err(ApiError::InvalidFieldName)
        ));
        // Length is checked before control characters, both before the value.
        assert!(matches!(
            check_rules(&pairs(&[("abcdef\u{1}", "\0")]), &l),
            Err(ApiError::FieldNameTooLong {
                limit: 5,
                received: 7
            })
        ));
        assert!(matches!(
            check_rules(&pairs(&[("a\u{7f}", "x")]), &l),
            Err(ApiError::InvalidFieldName)
        ));
        assert!(matches!(
            check_rules(&pairs(&[("a\u{85}", "x")]), &l),
            Err(ApiError::InvalidFieldName)
        ));
        assert!(matches!(
            check_rules(&pairs(&[("a\n", "x")]), &l),
            Err(ApiError::InvalidFieldName)
        ));
        match check_rules(&pairs(&[("ok", "1"), ("v", "ééééé")]), &l) {
            Err(ApiError::FieldValueTooLong {
                field,
                limit: 4,
                received: 5,
            }) => assert_eq!(field, "v"),
            other => panic!("{other:?}"),
        }
        match check_rules(&pairs(&[("v", "a\0")]), &l) {
            Err(ApiError::InvalidFieldValue { field }) => assert_eq!(field, "v"),
            other => panic!("{other:?}"),
        }
        // Other control characters and newlines in values are kept.
        assert!(check_rules(&pairs(&[("v", "a\n\t\u{1}")]), &l).is_ok());
        // Names are counted in characters, not bytes.
        assert!(check_rules(&pairs(&[("ééééé", "x")]), &l).is_ok());
        assert!(matches!(
            check_rules(&[], &l),
            Err(ApiError::EmptySubmission)
        ));
    }

    #[test]
    fn honeypot() {
        let mut p = pairs(&[("email", "a"), ("website", ""), ("website", "")]);
        assert_eq!(apply_honeypot(&mut p, Some("website")), Honeypot::Clear);
        assert_eq!(p, pairs(&[("email", "a")]));
        let mut p = pairs(&[("email", "a"), ("website", ""), ("website", "spam")]);
        assert_eq!(apply_honeypot(&mut p, Some("website")), Honeypot::Tripped);
        let mut p = pairs(&[("website", "x")]);
        assert_eq!(apply_honeypot(&mut p, None), Honeypot::Clear);
        assert_eq!(p.len(), 1);
    }

    #[test]
    fn normalisation_and_fingerprint() {
        let fields =
            NormalisedFields::from_pairs(pairs(&[("z", "1"), ("a", "x"), ("z", "2"), ("é", "ü")]));
        assert_eq!(fields.value_count(), 4);
        assert_eq!(
            serde_json::to_string(&fields.to_json()).unwrap(),
            r#"{"z":["1","2"],"a":["x"],"é":["ü"]}"#
        );
        let expected =
            crate::digest::sha256_hex(r#"[["z",["1","2"]],["a",["x"]],["é",["ü"]]]"#.as_bytes());
        assert_eq!(fields.fingerprint(), expected);
        assert_eq!(
            crate::model::fields::count_stored_values(&fields.to_json()),
            4
        );
        let reordered =
            NormalisedFields::from_pairs(pairs(&[("a", "x"), ("z", "1"), ("z", "2"), ("é", "ü")]));
        assert_ne!(
            reordered.fingerprint(),
            fields.fingerprint(),
            "name order is data"
        );
    }
}
