//! The keyset condition of a newest-first listing: `(time, id) < ($1, $2)`, one row
//! comparison, so that PostgreSQL walks the `(…, time, id)` index from the cursor on.
//!
//! Written as an expression of its own rather than with `diesel::dsl::sql`, which marks
//! every query using it as unsafe to cache: with it, each page after the first would be
//! parsed and planned again. This one is cached like any query-builder query (a test counts
//! the statements Diesel prepares).

use chrono::{DateTime, Utc};
use diesel::expression::{is_aggregate, AppearsOnTable, Expression, ValidGrouping};
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::result::QueryResult;
use diesel::sql_types::{Bool, Text, Timestamptz};

/// Rows before `(time, id)` in `(time_column, id_column)` order.
#[derive(Debug, Clone)]
pub struct Before<T, I> {
    time_column: T,
    id_column: I,
    time: DateTime<Utc>,
    id: String,
}

pub fn before<T, I>(time_column: T, id_column: I, time: DateTime<Utc>, id: String) -> Before<T, I> {
    Before {
        time_column,
        id_column,
        time,
        id,
    }
}

impl<T, I> Expression for Before<T, I> {
    type SqlType = Bool;
}

impl<T, I> ValidGrouping<()> for Before<T, I> {
    type IsAggregate = is_aggregate::No;
}

impl<T, I, QS> AppearsOnTable<QS> for Before<T, I>
where
    T: AppearsOnTable<QS>,
    I: AppearsOnTable<QS>,
{
}

impl<T, I> QueryId for Before<T, I> {
    type QueryId = ();
    // The statement text identifies it in the cache.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<T, I> QueryFragment<Pg> for Before<T, I>
where
    T: QueryFragment<Pg>,
    I: QueryFragment<Pg>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("(");
        self.time_column.walk_ast(out.reborrow())?;
        out.push_sql(", ");
        self.id_column.walk_ast(out.reborrow())?;
        out.push_sql(") < (");
        out.push_bind_param::<Timestamptz, _>(&self.time)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&self.id)?;
        out.push_sql(")");
        Ok(())
    }
}
