//! Hand-written statements that PostgreSQL prepares once per connection.
//!
//! Diesel's `sql_query` is never cached as a prepared statement, so a statement it runs is
//! parsed and planned again on every execution. The hot statements that the query builder
//! cannot express (the outbox insert, the claim) are written as [`PreparedSql`] instead: a
//! fixed text with a static identity, which Diesel's statement cache keeps per connection.

use std::marker::PhantomData;

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::result::QueryResult;
use diesel::serialize::ToSql;
use diesel::sql_types::HasSqlType;

/// A fixed SQL text in which each `?` stands for the next bind, in order. `Id` names the
/// statement in the cache (one marker type per statement); `ST` is the row's SQL type.
pub struct PreparedSql<Id, ST, B> {
    sql: &'static str,
    binds: B,
    marker: PhantomData<(Id, ST)>,
}

impl<Id, ST, B> PreparedSql<Id, ST, B> {
    pub fn new(sql: &'static str, binds: B) -> Self {
        PreparedSql {
            sql,
            binds,
            marker: PhantomData,
        }
    }
}

impl<Id: 'static, ST, B> QueryId for PreparedSql<Id, ST, B> {
    type QueryId = Id;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Id, ST, B> Query for PreparedSql<Id, ST, B>
where
    ST: diesel::sql_types::SqlType + diesel::query_builder::QueryId,
{
    type SqlType = ST;
}

impl<Id, ST, B: Binds> QueryFragment<Pg> for PreparedSql<Id, ST, B> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        for (index, piece) in self.sql.split('?').enumerate() {
            if index > 0 {
                self.binds.push(index - 1, out.reborrow())?;
            }
            out.push_sql(piece);
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
    fn push<'b>(&'b self, index: usize, out: AstPass<'_, 'b, Pg>) -> QueryResult<()>;
}

macro_rules! tuple_binds {
    ($($name:ident $index:tt),+) => {
        impl<$($name: PushBind),+> Binds for ($($name,)+) {
            fn push<'b>(&'b self, index: usize, out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
                match index {
                    $($index => self.$index.push(out),)+
                    _ => Err(diesel::result::Error::QueryBuilderError(
                        "more `?` placeholders than binds".into(),
                    )),
                }
            }
        }
    };
}

tuple_binds!(A 0);
tuple_binds!(A 0, B 1);
tuple_binds!(A 0, B 1, C 2);
tuple_binds!(A 0, B 1, C 2, D 3);
tuple_binds!(A 0, B 1, C 2, D 3, E 4);
tuple_binds!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_binds!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_binds!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_binds!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_binds!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_binds!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_binds!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
tuple_binds!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
