//! How a database call fails, and what a caller may ask of the failure (whether the
//! statement may have committed, which constraint refused it, a summary fit for a log).

use std::time::Duration;

/// A failure to reach or use the database. Callers map every variant to
/// `503 storage_unavailable`; the text is for logs and never reaches a client.
///
/// The wrapped errors are part of the message, not sources: a chain printer (`{:#}`)
/// would print them twice.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database query failed: {0}")]
    Query(diesel::result::Error),
    #[error("no database connection available: {0}")]
    Pool(String),
    #[error("cannot connect to the database: {0}")]
    Connect(diesel::ConnectionError),
    #[error("the database did not answer within {0:?}")]
    Deadline(Duration),
    #[error("the database refuses connections")]
    Unreachable,
    /// Every connection of a share of the pool (GraphQL's) stayed in use past the
    /// checkout timeout.
    #[error("every connection of this share of the pool is in use")]
    ShareExhausted,
    /// One operation asked for more calls than its allowance ([`Db::for_operation`]).
    #[error("the operation needs more than {limit} database calls")]
    CallsExhausted { limit: usize },
}

impl From<diesel::result::Error> for DbError {
    fn from(error: diesel::result::Error) -> Self {
        DbError::Query(error)
    }
}

impl From<diesel::ConnectionError> for DbError {
    fn from(error: diesel::ConnectionError) -> Self {
        DbError::Connect(error)
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for DbError {
    fn from(error: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        DbError::Pool(error.to_string())
    }
}

impl DbError {
    /// A row was read but a value in it could not be: a build or data problem, not an
    /// outage.
    pub fn is_unreadable_row(&self) -> bool {
        matches!(
            self,
            DbError::Query(diesel::result::Error::DeserializationError(_))
        )
    }

    /// Whether the statement may have committed though the call failed: the answer was
    /// lost (a deadline, a connection that broke), not refused by the database.
    pub fn outcome_unknown(&self) -> bool {
        use diesel::result::DatabaseErrorKind as Kind;
        matches!(
            self,
            DbError::Deadline(_)
                | DbError::Query(diesel::result::Error::DatabaseError(
                    Kind::UnableToSendCommand | Kind::ClosedConnection,
                    _,
                ))
        )
    }

    /// Whether the connection the call ran on is no use any more: the server took no
    /// writes (`25006`, a demoted primary or a standby), the connection broke, or the
    /// server answered with an error this service never expects of its own statements
    /// (`57P01`-`57P03`, a shutdown or a crash, are among those: the SQLSTATE itself is
    /// not visible through Diesel). A constraint's refusal leaves it as good as before.
    pub fn ends_connection(&self) -> bool {
        use diesel::result::DatabaseErrorKind as Kind;
        matches!(
            self,
            DbError::Query(diesel::result::Error::DatabaseError(
                Kind::ReadOnlyTransaction
                    | Kind::UnableToSendCommand
                    | Kind::ClosedConnection
                    | Kind::Unknown,
                _,
            ))
        )
    }

    /// A foreign key, named `constraint`, refused the statement.
    pub fn violates_foreign_key(&self, constraint: &str) -> bool {
        matches!(
            self,
            DbError::Query(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::ForeignKeyViolation,
                info,
            )) if info.constraint_name() == Some(constraint)
        )
    }

    /// The outbox statement counted a batch's rate limits and found a counter over its
    /// limit (the function `rate_limit_holds`, migration counted_outbox): it wrote nothing.
    pub fn exceeds_rate_limit(&self) -> bool {
        matches!(
            self,
            DbError::Query(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::CheckViolation,
                info,
            )) if info.constraint_name() == Some("rate_limit_holds")
        )
    }

    /// What went wrong, without the driver's message (which may quote values).
    pub fn summary(&self) -> String {
        use diesel::result::Error as Q;
        match self {
            DbError::Query(Q::DatabaseError(kind, info)) => match info.constraint_name() {
                Some(constraint) => format!("database error {kind:?} on constraint {constraint}"),
                None => format!("database error {kind:?}"),
            },
            DbError::Query(Q::NotFound) => "row not found".into(),
            DbError::Query(Q::DeserializationError(error)) => {
                // Diesel wraps a column's decoding error with the column's name.
                let (column, cause) =
                    match error.downcast_ref::<diesel::result::DeserializeFieldError>() {
                        Some(field) => (field.field_name.as_deref(), &field.error),
                        None => (None, error),
                    };
                let column = column.unwrap_or("a column");
                match cause.downcast_ref::<crate::model::UnknownStoredValue>() {
                    Some(unknown) => format!("{column}: {unknown}"),
                    // Other decoders' messages can quote the value, which may be submitted data.
                    None => format!("{column}: a stored value this build cannot read"),
                }
            }
            DbError::Query(other) => format!("query error: {}", variant_name(other)),
            DbError::Pool(_) => "no connection available from the pool".into(),
            DbError::Connect(_) => "cannot connect to the database".into(),
            DbError::Deadline(limit) => format!("no answer from the database within {limit:?}"),
            DbError::Unreachable => "the database refuses connections".into(),
            DbError::ShareExhausted => {
                "every connection of GraphQL's share of the pool is in use".into()
            }
            DbError::CallsExhausted { limit } => {
                format!("an operation needed more than {limit} database calls")
            }
        }
    }
}

fn variant_name(error: &diesel::result::Error) -> String {
    let debug = format!("{error:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("unknown")
        .to_string()
}
