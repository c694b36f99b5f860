//! The operator alerts owed (migration operator_alerts): written with the endpoint event
//! they announce, taken by the workers' alert sender (src/delivery/alerts.rs) under a
//! lease, finished per channel.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::operator_alerts;
use super::DbError;
use crate::model::ids::{DestinationId, EndpointId};
use crate::model::state::{EndpointEventKind, PauseReason};

/// One alert as a sender takes it.
#[derive(Debug, Clone, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = operator_alerts)]
#[diesel(check_for_backend(diesel::pg::Pg))]
pub struct AlertRow {
    pub id: i64,
    pub event_id: i64,
    pub kind: EndpointEventKind,
    pub endpoint_id: EndpointId,
    pub destination_id: DestinationId,
    pub reason: Option<PauseReason>,
    pub failed_deliveries: i32,
    pub occurred_at: DateTime<Utc>,
    pub email_sent_at: Option<DateTime<Utc>>,
    pub webhook_sent_at: Option<DateTime<Utc>>,
    pub attempts: i32,
}

/// Records the alert an endpoint event of a destination owes, in the event's transaction
/// (db/endpoint_events.rs `write_event`). Only a warning, a pause and a resume are announced.
pub(super) async fn owe(
    conn: &mut AsyncPgConnection,
    event_id: i64,
    endpoint: &EndpointId,
    destination: &DestinationId,
    kind: EndpointEventKind,
    reason: Option<PauseReason>,
    at: DateTime<Utc>,
) -> QueryResult<()> {
    use diesel::sql_types::{BigInt, Nullable, Text, Timestamptz};
    if !matches!(
        kind,
        EndpointEventKind::Failing | EndpointEventKind::Paused | EndpointEventKind::Resumed
    ) {
        return Ok(());
    }
    diesel::sql_query(include_str!("sql/alerts_owe.sql"))
        .bind::<BigInt, _>(event_id)
        .bind::<Text, _>(kind.as_str())
        .bind::<Text, _>(endpoint)
        .bind::<Text, _>(destination)
        .bind::<Nullable<Text>, _>(reason.map(|r| r.as_str()))
        .bind::<Timestamptz, _>(at)
        .execute(conn)
        .await?;
    Ok(())
}

/// Takes up to `limit` alerts due by `now` for `lease` (alerts_take_due.sql), oldest
/// first.
pub async fn take_due(
    conn: &mut AsyncPgConnection,
    now: DateTime<Utc>,
    lease: std::time::Duration,
    limit: i64,
) -> Result<Vec<AlertRow>, DbError> {
    use diesel::sql_types::{BigInt, Interval, Timestamptz};
    let mut taken: Vec<AlertRow> = diesel::sql_query(include_str!("sql/alerts_take_due.sql"))
        .bind::<Timestamptz, _>(now)
        .bind::<Interval, _>(super::queue::interval(lease))
        .bind::<BigInt, _>(limit)
        .load(conn)
        .await?;
    taken.sort_by_key(|alert| alert.id);
    Ok(taken)
}

/// What one sending of an alert came to.
#[derive(Debug, Clone)]
pub struct AlertProgress {
    pub email_sent_at: Option<DateTime<Utc>>,
    pub webhook_sent_at: Option<DateTime<Utc>>,
    /// `None`: done (every configured channel took it, or the sender gave up).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Bounded, and never a response body.
    pub last_error: Option<String>,
}

/// Writes what a sending came to.
pub async fn record(
    conn: &mut AsyncPgConnection,
    id: i64,
    progress: &AlertProgress,
) -> Result<(), DbError> {
    diesel::update(operator_alerts::table.find(id))
        .set((
            operator_alerts::email_sent_at.eq(progress.email_sent_at),
            operator_alerts::webhook_sent_at.eq(progress.webhook_sent_at),
            operator_alerts::next_attempt_at.eq(progress.next_attempt_at),
            operator_alerts::last_error.eq(progress.last_error.as_deref()),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// Deletes up to `limit` finished alerts that occurred before `cutoff`
/// (alerts_delete_finished.sql).
pub async fn delete_finished(
    conn: &mut AsyncPgConnection,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> Result<usize, DbError> {
    use diesel::sql_types::{BigInt, Timestamptz};
    Ok(
        diesel::sql_query(include_str!("sql/alerts_delete_finished.sql"))
            .bind::<Timestamptz, _>(cutoff)
            .bind::<BigInt, _>(limit)
            .execute(conn)
            .await?,
    )
}
