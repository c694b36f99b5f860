//! Relay connections with opaque keyset cursors, newest first (never OFFSET).

use async_graphql::connection::{Connection, Edge};
use async_graphql::OutputType;
use base64::Engine;
use chrono::{DateTime, Utc};

use super::error::Result;
use crate::error::ApiError;

/// The page size when `first` is left out.
const DEFAULT_PAGE_SIZE: usize = 20;

/// What a page costs against `FORMS_GRAPHQL_MAX_COMPLEXITY`: the connection itself and, for
/// every row it may hold (`first`, or the default), what each row selects. Counting the
/// selection once whatever `first` is would let one small document ask for a hundred
/// times the work.
pub fn page_complexity(first: Option<i32>, child_complexity: usize) -> usize {
    let rows = first.map_or(DEFAULT_PAGE_SIZE, |n| usize::try_from(n).unwrap_or(0));
    rows.saturating_mul(child_complexity).saturating_add(1)
}

/// A row's position: its time and id, the listing's sort key.
pub type Position = (DateTime<Utc>, String);

/// `v1:<microseconds>:<id>` and a check of 8 hex digits, base64url: opaque to clients, and
/// an edited cursor is recognised as such rather than silently read as another position.
pub fn encode_cursor((time, id): &Position) -> String {
    let payload = format!("v1:{}:{id}", time.timestamp_micros());
    let check = &crate::digest::sha256_hex(payload.as_bytes())[..8];
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{payload}:{check}"))
}

pub fn decode_cursor(cursor: &str) -> Result<Position, ApiError> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| ApiError::InvalidCursor)?;
    let text = String::from_utf8(bytes).map_err(|_| ApiError::InvalidCursor)?;
    let (payload, check) = text.rsplit_once(':').ok_or(ApiError::InvalidCursor)?;
    if check != &crate::digest::sha256_hex(payload.as_bytes())[..8] {
        return Err(ApiError::InvalidCursor);
    }
    let mut parts = payload.splitn(3, ':');
    let (Some("v1"), Some(micros), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(ApiError::InvalidCursor);
    };
    let micros: i64 = micros.parse().map_err(|_| ApiError::InvalidCursor)?;
    let time = DateTime::from_timestamp_micros(micros).ok_or(ApiError::InvalidCursor)?;
    Ok((time, id.to_string()))
}

/// The arguments of a page, checked: `first` within 0..=limit (above the limit is an
/// error, not a silent clamp), `after` decoded.
pub struct PageRequest {
    pub first: usize,
    pub after: Option<Position>,
}

impl PageRequest {
    pub fn new(first: Option<i32>, after: Option<String>, limit: usize) -> Result<PageRequest> {
        let first = match first {
            None => DEFAULT_PAGE_SIZE.min(limit),
            Some(n) if n < 0 => {
                return Err(ApiError::InvalidInput {
                    field: "first".into(),
                    reason: "must not be negative".into(),
                }
                .into())
            }
            Some(n) if n as usize > limit => {
                return Err(ApiError::PageSizeTooLarge {
                    limit,
                    requested: i64::from(n),
                }
                .into())
            }
            Some(n) => n as usize,
        };
        let after = after.map(|cursor| decode_cursor(&cursor)).transpose()?;
        Ok(PageRequest { first, after })
    }

    /// How many rows to fetch: one more than asked, to know whether there is a next page.
    pub fn fetch_limit(&self) -> i64 {
        self.first as i64 + 1
    }

    /// A page of nothing (a filter no row can match).
    pub fn empty<Node: OutputType>(&self) -> Connection<String, Node> {
        Connection::new(self.after.is_some(), false)
    }

    /// Builds the connection from up to `first + 1` rows in order.
    pub fn connection<Row, Node: OutputType>(
        &self,
        mut rows: Vec<Row>,
        position: impl Fn(&Row) -> Position,
        node: impl Fn(Row) -> Node,
    ) -> Connection<String, Node> {
        let has_next = rows.len() > self.first;
        rows.truncate(self.first);
        let mut connection = Connection::new(self.after.is_some(), has_next);
        connection.edges.extend(
            rows.into_iter()
                .map(|row| Edge::new(encode_cursor(&position(&row)), node(row))),
        );
        connection
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_edits() {
        let position = (
            DateTime::from_timestamp_micros(1_764_000_000_123_456).unwrap(),
            "whd_abc".to_string(),
        );
        let cursor = encode_cursor(&position);
        assert_eq!(decode_cursor(&cursor).unwrap(), position);
        assert!(!cursor.contains("whd_"), "opaque");
        let mut edited = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(&cursor)
                .unwrap(),
        )
        .unwrap();
        edited = edited.replace("whd_abc", "whd_abd");
        let edited = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(edited);
        assert!(matches!(
            decode_cursor(&edited),
            Err(ApiError::InvalidCursor)
        ));
        for junk in ["", "!!!", "djE6MTox", &cursor[..cursor.len() - 2]] {
            assert!(
                matches!(decode_cursor(junk), Err(ApiError::InvalidCursor)),
                "{junk}"
            );
        }
    }
}
