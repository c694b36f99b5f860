//! Hand-written statements, kept as `.sql` files under `db/sql/` and prepared once per
//! connection.
//!
//! Diesel's `sql_query` is never cached as a prepared statement, so a statement it runs is
//! parsed and planned again on every execution. The statements the query builder cannot
//! express are written as [`Statement`]s instead: a fixed text with a static identity,
//! which Diesel's statement cache keeps per connection.
//!
//! The text uses PostgreSQL's own `$n` placeholders (`$1` is the first bind, and may appear
//! more than once). It is split once into text and placeholders by a tokenizer that knows
//! string literals, quoted identifiers, comments and dollar quoting, so a `$1` or a `?`
//! inside any of them is left alone.

use std::marker::PhantomData;
use std::sync::OnceLock;

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::result::QueryResult;
use diesel::serialize::ToSql;
use diesel::sql_types::HasSqlType;

/// The text of one statement, split into pieces on first use.
pub struct SqlText {
    text: &'static str,
    pieces: OnceLock<Vec<Piece>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(std::ops::Range<usize>),
    /// A `$n` placeholder: bind `n - 1`.
    Bind(usize),
}

impl SqlText {
    pub const fn new(text: &'static str) -> SqlText {
        SqlText {
            text,
            pieces: OnceLock::new(),
        }
    }

    fn pieces(&self) -> &[Piece] {
        self.pieces.get_or_init(|| split(self.text))
    }

    /// The highest `$n` the text uses (the number of binds it needs).
    pub fn placeholders(&self) -> usize {
        self.pieces()
            .iter()
            .filter_map(|piece| match piece {
                Piece::Bind(index) => Some(index + 1),
                Piece::Text(_) => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The text with every `$n` replaced by `values[n - 1]`, in parentheses. The benchmarks
    /// run the product's statements through pgbench, whose variables and expressions stand
    /// in for the binds.
    #[cfg(any(test, feature = "testing"))]
    pub fn render(&self, values: &[&str]) -> String {
        self.pieces()
            .iter()
            .map(|piece| match piece {
                Piece::Text(range) => self.text[range.clone()].to_string(),
                Piece::Bind(index) => format!("({})", values[*index]),
            })
            .collect()
    }
}

/// A statement from `db/sql/<name>`, with the shared event-writing tail appended when
/// asked: `sql!("claim.sql", with_events)`, or several files' text one after the other (a
/// shared start, then the rest): `sql!("feed_snapshot.sql", "feed_read.sql")`.
macro_rules! sql {
    ($file:literal) => {
        $crate::db::statement::SqlText::new(include_str!(concat!("sql/", $file)))
    };
    ($file:literal, with_events) => {
        $crate::db::statement::SqlText::new(concat!(
            include_str!(concat!("sql/", $file)),
            include_str!("sql/write_events.sql")
        ))
    };
    ($first:literal, $($then:literal),+) => {
        $crate::db::statement::SqlText::new(concat!(
            include_str!(concat!("sql/", $first)),
            $(include_str!(concat!("sql/", $then))),+
        ))
    };
}
pub(crate) use sql;

/// Splits `text` into literal pieces and `$n` placeholders.
fn split(text: &str) -> Vec<Piece> {
    let bytes = text.as_bytes();
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut at = 0;
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    while at < bytes.len() {
        match bytes[at] {
            b'\'' | b'"' => {
                let quote = bytes[at];
                at += 1;
                while at < bytes.len() {
                    if bytes[at] == quote {
                        // A doubled quote is an escaped quote inside the literal.
                        if bytes.get(at + 1) == Some(&quote) {
                            at += 2;
                            continue;
                        }
                        break;
                    }
                    at += 1;
                }
                at += 1;
            }
            b'-' if bytes.get(at + 1) == Some(&b'-') => {
                while at < bytes.len() && bytes[at] != b'\n' {
                    at += 1;
                }
            }
            b'/' if bytes.get(at + 1) == Some(&b'*') => {
                // Block comments nest in PostgreSQL.
                let mut depth = 0usize;
                while at < bytes.len() {
                    if bytes[at] == b'/' && bytes.get(at + 1) == Some(&b'*') {
                        depth += 1;
                        at += 2;
                    } else if bytes[at] == b'*' && bytes.get(at + 1) == Some(&b'/') {
                        depth -= 1;
                        at += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        at += 1;
                    }
                }
            }
            b'$' if at == 0 || !is_ident(bytes[at - 1]) => {
                let digits = bytes[at + 1..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                if digits > 0 {
                    let number: usize = text[at + 1..at + 1 + digits].parse().unwrap_or(0);
                    if number > 0 {
                        pieces.push(Piece::Text(start..at));
                        pieces.push(Piece::Bind(number - 1));
                        at += 1 + digits;
                        start = at;
                        continue;
                    }
                }
                // A dollar-quoted string: `$tag$ … $tag$`, the tag possibly empty.
                let tag_length = bytes[at + 1..].iter().take_while(|b| is_ident(**b)).count();
                let tag_end = at + 1 + tag_length;
                if bytes.get(tag_end) == Some(&b'$') {
                    let tag = &text[at..=tag_end];
                    match text[tag_end + 1..].find(tag) {
                        Some(offset) => at = tag_end + 1 + offset + tag.len(),
                        None => at = bytes.len(),
                    }
                } else {
                    at += 1;
                }
            }
            _ => at += 1,
        }
    }
    pieces.push(Piece::Text(start..bytes.len()));
    pieces.retain(|piece| !matches!(piece, Piece::Text(range) if range.is_empty()));
    pieces
}

/// One execution of a statement: its text and its binds. `Id` names the statement in the
/// cache (one marker type per statement); `ST` is the row's SQL type.
pub struct Statement<Id, ST, B> {
    sql: &'static SqlText,
    binds: B,
    marker: PhantomData<(Id, ST)>,
}

impl<Id, ST, B: Binds> Statement<Id, ST, B> {
    pub fn new(sql: &'static SqlText, binds: B) -> Self {
        debug_assert_eq!(
            sql.placeholders(),
            B::COUNT,
            "a statement's binds must match its placeholders"
        );
        Statement {
            sql,
            binds,
            marker: PhantomData,
        }
    }
}

impl<Id: 'static, ST, B> QueryId for Statement<Id, ST, B> {
    type QueryId = Id;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Id, ST, B> Query for Statement<Id, ST, B>
where
    ST: diesel::sql_types::SqlType,
{
    type SqlType = ST;
}

impl<Id, ST, B: Binds> QueryFragment<Pg> for Statement<Id, ST, B> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let text = self.sql.text;
        for piece in self.sql.pieces() {
            match piece {
                Piece::Text(range) => out.push_sql(&text[range.clone()]),
                // Diesel numbers the placeholders it writes in order; a `$n` used twice is
                // sent as two placeholders with the same value.
                Piece::Bind(index) => self.binds.push(*index, out.reborrow())?,
            }
        }
        Ok(())
    }
}

/// One bind: a value and the SQL type it is sent as.
pub struct Bind<ST, T>(T, PhantomData<ST>);

pub fn bind<ST, T>(value: T) -> Bind<ST, T> {
    Bind(value, PhantomData)
}

pub trait PushBind {
    fn push<'b>(&'b self, out: AstPass<'_, 'b, Pg>) -> QueryResult<()>;
}

impl<ST, T> PushBind for Bind<ST, T>
where
    Pg: HasSqlType<ST>,
    T: ToSql<ST, Pg>,
{
    fn push<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_bind_param::<ST, T>(&self.0)
    }
}

/// A tuple of binds, pushed by position.
pub trait Binds {
    /// How many binds the tuple holds.
    const COUNT: usize;
    fn push<'b>(&'b self, index: usize, out: AstPass<'_, 'b, Pg>) -> QueryResult<()>;
}

impl Binds for () {
    const COUNT: usize = 0;
    fn push<'b>(&'b self, _: usize, _: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        Err(diesel::result::Error::QueryBuilderError(
            "the statement has a placeholder but no binds".into(),
        ))
    }
}

macro_rules! tuple_binds {
    ($count:literal: $($name:ident $index:tt),+) => {
        impl<$($name: PushBind),+> Binds for ($($name,)+) {
            const COUNT: usize = $count;
            fn push<'b>(&'b self, index: usize, out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
                match index {
                    $($index => self.$index.push(out),)+
                    _ => Err(diesel::result::Error::QueryBuilderError(
                        "a placeholder beyond the binds".into(),
                    )),
                }
            }
        }
    };
}

tuple_binds!(1: A 0);
tuple_binds!(2: A 0, B 1);
tuple_binds!(3: A 0, B 1, C 2);
tuple_binds!(4: A 0, B 1, C 2, D 3);
tuple_binds!(5: A 0, B 1, C 2, D 3, E 4);
tuple_binds!(6: A 0, B 1, C 2, D 3, E 4, F 5);
tuple_binds!(7: A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_binds!(8: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_binds!(9: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_binds!(10: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_binds!(11: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_binds!(12: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
tuple_binds!(13: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
tuple_binds!(14: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);
tuple_binds!(15: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14);
tuple_binds!(16: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);
tuple_binds!(17: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16);
tuple_binds!(18: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16, R 17);
tuple_binds!(19: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16, R 17, S 18);
tuple_binds!(20: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16, R 17, S 18, T 19);
tuple_binds!(21: A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16, R 17, S 18, T 19, U 20);

#[cfg(test)]
mod tests {
    use super::*;

    fn binds(text: &'static str) -> Vec<usize> {
        SqlText::new(text)
            .pieces()
            .iter()
            .filter_map(|p| match p {
                Piece::Bind(i) => Some(*i),
                Piece::Text(_) => None,
            })
            .collect()
    }

    #[test]
    fn placeholders_are_found_outside_literals_comments_and_dollar_quotes() {
        assert_eq!(binds("SELECT $1, $2, $1"), vec![0, 1, 0]);
        assert_eq!(
            binds("SELECT '$1', \"$2\", $3 -- $4\n, /* $5 /* $6 */ $7 */ $8"),
            vec![2, 7]
        );
        assert_eq!(binds("SELECT $$ $1 $$, $tag$ $2 $tag$, $3"), vec![2]);
        assert_eq!(binds("SELECT 'it''s $1', $2"), vec![1]);
        // jsonb's `?` operator and identifiers ending in a dollar sign stay text.
        assert_eq!(binds("SELECT a ? 'k', b$1 FROM t WHERE c = $10"), vec![9]);
        assert_eq!(SqlText::new("SELECT $3, $1").placeholders(), 3);
        assert_eq!(SqlText::new("SELECT 1").placeholders(), 0);
    }

    #[test]
    fn the_text_is_kept_whole_around_placeholders() {
        let sql = SqlText::new("a $1 b $22");
        let rebuilt: String = sql
            .pieces()
            .iter()
            .map(|p| match p {
                Piece::Text(r) => sql.text[r.clone()].to_string(),
                Piece::Bind(i) => format!("<{i}>"),
            })
            .collect();
        assert_eq!(rebuilt, "a <0> b <21>");
    }

    #[test]
    fn rendering_puts_values_where_the_placeholders_are() {
        let sql = SqlText::new("SELECT $2, '$1', $1 -- $2");
        assert_eq!(sql.render(&["1", "'x'"]), "SELECT ('x'), '$1', (1) -- $2");
    }
}
