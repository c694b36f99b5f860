//! The `DateTime` scalar.

use async_graphql::{InputValueError, InputValueResult, Scalar, ScalarType, Value};
use chrono::{DateTime, Utc};

use crate::clock::format_timestamp;

/// RFC 3339 in UTC with six fractional digits and `Z`, like every time the service shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp(pub DateTime<Utc>);

#[Scalar(name = "DateTime")]
impl ScalarType for Timestamp {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(text) => DateTime::parse_from_rfc3339(text)
                .map(|time| Timestamp(time.with_timezone(&Utc)))
                .map_err(|_| {
                    InputValueError::custom(
                        "expected an RFC 3339 date-time, such as 2026-08-24T14:34:27.651841Z",
                    )
                }),
            _ => Err(InputValueError::expected_type(value)),
        }
    }

    fn to_value(&self) -> Value {
        Value::String(format_timestamp(self.0))
    }
}
