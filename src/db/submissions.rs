//! Storing submissions: the transactional outbox of public intake.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::{
    Array, BigInt, Bool, Integer, Interval, Json, Nullable, Text, Timestamptz,
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::models::{ClaimedDelivery, KeyedSubmission, ReceiverOptions, SubmissionRow};
use super::rate_limits::BatchCounters;
use super::statement::{bind, sql, Bind, SqlText, Statement};
use super::DbError;
use crate::model::ids::{
    ClaimToken, DeliveryId, DestinationId, EndpointId, ProjectId, SubmissionId,
};
use crate::model::search::{FieldValue, SearchWords, MAX_PERSON_SUBMISSIONS};
use crate::model::spam::SubmissionFolder;
use crate::model::state::{DeliveryState, DestinationKind};

/// One submission of a batch for [`insert_batch`].
#[derive(Debug, Clone)]
pub struct NewSubmission {
    pub id: SubmissionId,
    pub endpoint_id: EndpointId,
    pub received_at: DateTime<Utc>,
    /// The ordered `{"name": ["value", …], …}` object.
    pub fields: serde_json::Value,
    /// The idempotency key and the payload fingerprint, together or not at all.
    pub idempotency: Option<(String, String)>,
    /// The id of its first delivery (to its endpoint's first destination, should it have
    /// any at the moment of the insert); the others' are made by the statement.
    pub delivery_id: DeliveryId,
    /// Its first delivery's claim token, should intake claim it for this process's
    /// worker (`None` where it may not): made before the statement, so that a claim whose
    /// answer was lost can still be given back.
    pub claim_token: Option<ClaimToken>,
    /// Why it was judged spam (`None`: accepted). Spam is stored in the spam folder and
    /// gets no delivery.
    pub spam_reasons: Option<Vec<String>>,
    /// The files uploaded with it, stored already and attached by the same statement.
    pub files: Vec<crate::model::ids::FileId>,
    /// The W3C trace context of the span that accepted it, kept for its deliveries'
    /// attempts; `None` with traces off (telemetry/traces.rs).
    pub trace_parent: Option<String>,
}

/// Public for the benchmarks, which run it through pgbench.
pub static OUTBOX_INSERT_BATCH: SqlText = sql!("outbox_insert_batch.sql", with_events);
struct OutboxInsertBatch;

/// How many of a batch's new deliveries to write already claimed for this process's
/// worker (claiming at intake), and the claim's terms.
#[derive(Debug, Clone)]
pub struct IntakeClaim {
    /// At most this many (0: none).
    pub limit: u32,
    pub lease: std::time::Duration,
    /// Requests in flight allowed per destination (unless it sets its own).
    pub destination_concurrency: u32,
    /// This process's mark on the workers' wake-up, sent when the statement held claim
    /// locks but left nothing pending: other processes' workers look again, this one's
    /// worker (which gets what was claimed) does not need to.
    pub wake_mark: Option<Arc<str>>,
}

impl IntakeClaim {
    pub const NONE: IntakeClaim = IntakeClaim {
        limit: 0,
        lease: std::time::Duration::ZERO,
        destination_concurrency: 0,
        wake_mark: None,
    };
}

/// One submission [`insert_batch`] wrote.
pub struct Written {
    pub id: SubmissionId,
    /// Whether any delivery was queued with it (its endpoint had a destination).
    pub delivery_queued: bool,
    /// Its first delivery, when it was written claimed for this process.
    pub claimed: Option<ClaimedDelivery>,
}

/// Writes every submission of `batch` and a delivery per destination of its endpoint,
/// in one statement (outbox_insert_batch.sql), up to `claim.limit` of the
/// deliveries claimed for this process. Answers every submission written; one missing
/// from the answer lost an idempotency-key race and wrote nothing. `now`: the time the
/// deliveries' due time is judged by (`None`: the database's clock).
///
/// `counters`: the batch's requests to add to their rate-limit counters as the
/// statement's last step (empty: none). Should any counter end over its limit, the
/// statement fails as a whole ([`DbError::exceeds_rate_limit`]) and writes nothing.
pub async fn insert_batch(
    conn: &mut AsyncPgConnection,
    batch: &[&NewSubmission],
    now: Option<DateTime<Utc>>,
    claim: IntakeClaim,
    counters: &BatchCounters<'_>,
) -> Result<Vec<Written>, DbError> {
    let ids: Vec<&str> = batch.iter().map(|s| s.id.as_str()).collect();
    let endpoints: Vec<&str> = batch.iter().map(|s| s.endpoint_id.as_str()).collect();
    let received: Vec<DateTime<Utc>> = batch.iter().map(|s| s.received_at).collect();
    let fields: Vec<&serde_json::Value> = batch.iter().map(|s| &s.fields).collect();
    let keys: Vec<Option<&str>> = batch
        .iter()
        .map(|s| s.idempotency.as_ref().map(|(key, _)| key.as_str()))
        .collect();
    let fingerprints: Vec<Option<&str>> = batch
        .iter()
        .map(|s| s.idempotency.as_ref().map(|(_, print)| print.as_str()))
        .collect();
    let deliveries: Vec<&str> = batch.iter().map(|s| s.delivery_id.as_str()).collect();
    let spam_reasons: Vec<Option<serde_json::Value>> = batch
        .iter()
        .map(|s| {
            s.spam_reasons
                .as_ref()
                .map(|reasons| serde_json::json!(reasons))
        })
        .collect();
    let tokens: Vec<Option<&str>> = if claim.limit > 0 {
        batch
            .iter()
            .map(|s| s.claim_token.as_ref().map(ClaimToken::as_str))
            .collect()
    } else {
        Vec::new()
    };
    let files: Vec<serde_json::Value> = batch
        .iter()
        .map(|s| serde_json::Value::from(s.files.iter().map(|id| id.as_str()).collect::<Vec<_>>()))
        .collect();
    let trace_parents: Vec<Option<&str>> =
        batch.iter().map(|s| s.trace_parent.as_deref()).collect();
    type Row = (
        SubmissionId,
        bool,
        Option<DeliveryId>,
        Option<ClaimToken>,
        Option<DestinationId>,
        Option<DestinationKind>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<i32>,
        i64,
    );
    let written: Vec<Row> = Statement::<
        OutboxInsertBatch,
        (
            Text,
            Bool,
            Nullable<Text>,
            Nullable<Text>,
            Nullable<Text>,
            Nullable<Text>,
            Nullable<Text>,
            Nullable<Text>,
            Nullable<Text>,
            Nullable<Text>,
            Nullable<Integer>,
            BigInt,
        ),
        _,
    >::new(
        &OUTBOX_INSERT_BATCH,
        (
            bind::<Array<Text>, _>(ids),
            bind::<Array<Text>, _>(endpoints),
            bind::<Array<Timestamptz>, _>(received),
            bind::<Array<Json>, _>(fields),
            bind::<Array<Nullable<Text>>, _>(keys),
            bind::<Array<Nullable<Text>>, _>(fingerprints),
            bind::<Array<Text>, _>(deliveries),
            bind::<Nullable<Timestamptz>, _>(now),
            bind::<Integer, _>(i32::try_from(claim.limit).unwrap_or(i32::MAX)),
            bind::<Interval, _>(super::queue::interval(claim.lease)),
            bind::<Integer, _>(i32::try_from(claim.destination_concurrency).unwrap_or(i32::MAX)),
            bind::<Array<Nullable<Text>>, _>(tokens),
            bind::<Text, _>(claim.wake_mark.as_deref().unwrap_or_default()),
            bind::<Array<Text>, _>(&counters.limiters),
            bind::<Array<Text>, _>(&counters.subjects),
            bind::<Array<Timestamptz>, _>(&counters.window_starts),
            bind::<Array<Integer>, _>(&counters.attempts),
            bind::<Array<Integer>, _>(&counters.limits),
            bind::<Array<Nullable<Json>>, _>(spam_reasons),
            bind::<Array<Json>, _>(&files),
            bind::<Array<Nullable<Text>>, _>(trace_parents),
        ),
    )
    .load(conn)
    .await?;
    let by_id: HashMap<&SubmissionId, &NewSubmission> = batch.iter().map(|s| (&s.id, *s)).collect();
    written
        .into_iter()
        .map(
            |(
                id,
                delivery_queued,
                delivery_id,
                token,
                destination_id,
                kind,
                url,
                signing_secret,
                destination_secret,
                previous_secret,
                failed,
                _notified,
            )| {
                let claimed = match (delivery_id, token, destination_id, kind, url) {
                    (
                        Some(delivery_id),
                        Some(claim_token),
                        Some(destination_id),
                        Some(kind),
                        Some(destination_url),
                    ) => {
                        let submission = by_id
                            .get(&id)
                            .ok_or(DbError::Query(diesel::result::Error::NotFound))?;
                        Some(ClaimedDelivery {
                            id: delivery_id,
                            claim_token,
                            endpoint_id: submission.endpoint_id.clone(),
                            destination_id,
                            kind,
                            destination_url,
                            // Claimed only when it goes where the destination points after
                            // the claim lock: the secrets live then sign it.
                            destination_secret,
                            destination_previous_secret: previous_secret,
                            signing_secret,
                            submission_id: Some(id.clone()),
                            cycle_attempts: 0,
                            received_at: Some(submission.received_at),
                            fields: Some(submission.fields.clone()),
                            destination_failed_deliveries: failed.unwrap_or(0),
                            // Intake claims webhooks only (intake_claim_destination_room).
                            endpoint_name: None,
                            reply_to_field: None,
                            reply_subject: None,
                            reply_body: None,
                            has_files: !submission.files.is_empty(),
                            // Nor a destination with receiver options of its own
                            // (intake_claim_destination_room).
                            receiver: ReceiverOptions::standard(),
                            trace_parent: submission.trace_parent.clone(),
                        })
                    }
                    _ => None,
                };
                Ok(Written {
                    id,
                    delivery_queued,
                    claimed,
                })
            },
        )
        .collect()
}

pub async fn find_by_idempotency_key(
    conn: &mut AsyncPgConnection,
    endpoint_id: &EndpointId,
    key: &str,
) -> Result<Option<KeyedSubmission>, DbError> {
    use super::schema::{submissions, webhook_deliveries};
    let has_delivery = diesel::dsl::exists(
        webhook_deliveries::table
            .filter(webhook_deliveries::submission_id.eq(submissions::id.nullable())),
    );
    Ok(submissions::table
        .filter(submissions::endpoint_id.eq(endpoint_id))
        .filter(submissions::idempotency_key.eq(key))
        .select((
            submissions::id,
            submissions::received_at,
            submissions::fields,
            submissions::payload_fingerprint,
            // Spam is answered as if accepted (its endpoint's destinations would have
            // had it), so its replay too.
            has_delivery.or(submissions::spam),
        ))
        .first(conn)
        .await
        .optional()?)
}

/// Filters of a submission listing: exclusive time bounds.
#[derive(Debug, Clone, Default)]
pub struct SubmissionFilter {
    /// Only the submissions of this project's endpoints.
    pub project: Option<ProjectId>,
    pub endpoint_id: Option<EndpointId>,
    /// The inbox (the default), the spam folder or both.
    pub folder: SubmissionFolder,
    pub received_after: Option<DateTime<Utc>>,
    pub received_before: Option<DateTime<Utc>>,
    /// Words its values hold (full-text, submissions_search_idx).
    pub search: Option<SearchWords>,
    /// A value one of its fields holds, letter case aside.
    pub value: Option<FieldValue>,
}

impl SubmissionFilter {
    /// A filter no submission matches (an empty time range).
    pub fn nothing() -> SubmissionFilter {
        SubmissionFilter {
            project: None,
            endpoint_id: None,
            folder: SubmissionFolder::All,
            received_after: Some(DateTime::<Utc>::UNIX_EPOCH),
            received_before: Some(DateTime::<Utc>::UNIX_EPOCH),
            search: None,
            value: None,
        }
    }
}

pub async fn find_many(
    conn: &mut AsyncPgConnection,
    ids: &[SubmissionId],
) -> Result<Vec<SubmissionRow>, DbError> {
    use super::schema::submissions;
    Ok(submissions::table
        .filter(submissions::id.eq_any(ids))
        .select(SubmissionRow::as_select())
        .load(conn)
        .await?)
}

/// Newest first; `after` is the (received_at, id) of the last row of the previous page.
pub async fn page(
    conn: &mut AsyncPgConnection,
    filter: &SubmissionFilter,
    after: Option<(DateTime<Utc>, String)>,
    limit: i64,
) -> Result<Vec<SubmissionRow>, DbError> {
    use super::schema::submissions;
    let mut query = filtered(filter).select(SubmissionRow::as_select());
    if let Some((received_at, id)) = after {
        query = query.filter(super::keyset::before(
            submissions::received_at,
            submissions::id,
            received_at,
            id,
        ));
    }
    let query = if filter.search.is_some() || filter.value.is_some() {
        // Newest first by an expression no index has: the planner then finds the matches
        // through submissions_search_idx and sorts them. Ordered by the column, it may walk
        // the newest-first index instead, testing each submission's words, whenever it
        // expects many to match (without statistics on the words it expects 0.5% to), and
        // for a rare word that walk reads the whole table (seconds on 10 million).
        query.order((
            sql::<Timestamptz>("submissions.received_at + interval '0 seconds'").desc(),
            submissions::id.desc(),
        ))
    } else {
        query.order((submissions::received_at.desc(), submissions::id.desc()))
    };
    Ok(query.limit(limit).load(conn).await?)
}

static SUBMISSIONS_FIRST_PAGES: SqlText = sql!("submissions_first_pages.sql");
struct SubmissionsFirstPages;

/// The first `limit` submissions (newest first) of each endpoint in `folder`, in one
/// statement.
pub async fn first_pages(
    conn: &mut AsyncPgConnection,
    endpoint_ids: &[EndpointId],
    limit: i64,
    folder: SubmissionFolder,
) -> Result<Vec<SubmissionRow>, DbError> {
    Ok(Statement::<
        SubmissionsFirstPages,
        (
            Text,
            Text,
            Timestamptz,
            Json,
            Nullable<Text>,
            Bool,
            Array<Nullable<Text>>,
            Nullable<Timestamptz>,
        ),
        _,
    >::new(
        &SUBMISSIONS_FIRST_PAGES,
        (
            bind::<Array<Text>, _>(endpoint_ids),
            bind::<BigInt, _>(limit),
            bind::<Nullable<Bool>, _>(folder.spam()),
        ),
    )
    .load(conn)
    .await?)
}

/// What erasing a submission did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EraseOutcome {
    Erased,
    NotFound,
    /// One of its deliveries is still owed (`pending` or `processing`): nothing was erased.
    DeliveryInProgress {
        state: DeliveryState,
    },
}

/// Erases a submission unless one of its deliveries is still owed. The delivery rows are
/// locked first, so a replay running at the same moment either finishes before (and the
/// erase is refused) or finds the submission gone (and the replay is refused). Deliveries
/// and attempts stay, their `submission_id` set to null.
pub async fn erase(
    conn: &mut AsyncPgConnection,
    id: &SubmissionId,
) -> Result<EraseOutcome, DbError> {
    use diesel_async::AsyncConnection;
    let ids = [id.clone()];
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            if let Some((_, state)) = first_owed(conn, &ids).await? {
                return Ok(EraseOutcome::DeliveryInProgress { state });
            }
            Ok(if delete_erased(conn, &ids).await? == 1 {
                EraseOutcome::Erased
            } else {
                EraseOutcome::NotFound
            })
        })
        .await?)
}

/// Locks every delivery of the submissions `ids` (one per destination), in id order so two
/// erasers cannot deadlock; the first still owed (`pending` or `processing`), if any.
async fn first_owed(
    conn: &mut AsyncPgConnection,
    ids: &[SubmissionId],
) -> Result<Option<(SubmissionId, DeliveryState)>, diesel::result::Error> {
    use super::schema::webhook_deliveries;
    let deliveries: Vec<(Option<SubmissionId>, DeliveryState)> = webhook_deliveries::table
        .filter(webhook_deliveries::submission_id.eq_any(ids))
        .select((webhook_deliveries::submission_id, webhook_deliveries::state))
        .order(webhook_deliveries::id)
        .for_update()
        .load(conn)
        .await?;
    Ok(deliveries
        .into_iter()
        .find(|(_, state)| !state.is_terminal())
        .and_then(|(id, state)| id.map(|id| (id, state))))
}

/// Deletes the submissions `ids` with an autoresponder's record of the address each was
/// answered at (the address may get another confirmation within the window, and keeps
/// nothing here); how many submissions were deleted. Their files are detached by the
/// foreign key, for the sweep.
async fn delete_erased(
    conn: &mut AsyncPgConnection,
    ids: &[SubmissionId],
) -> Result<usize, diesel::result::Error> {
    use super::schema::{autoresponder_recipients, submissions};
    diesel::delete(autoresponder_recipients::table.filter(
        autoresponder_recipients::submission_id.eq_any(ids.iter().map(SubmissionId::as_str)),
    ))
    .execute(conn)
    .await?;
    diesel::delete(submissions::table.filter(submissions::id.eq_any(ids)))
        .execute(conn)
        .await
}

/// The submissions holding `value` whole, in any folder of any endpoint.
fn holding_filter(value: &FieldValue, project: Option<&ProjectId>) -> SubmissionFilter {
    SubmissionFilter {
        project: project.cloned(),
        folder: SubmissionFolder::All,
        value: Some(value.clone()),
        ..SubmissionFilter::default()
    }
}

/// The submissions holding `value` whole (in any folder, of any endpoint of `project`, or
/// of every project), newest first; `None` when more than [`MAX_PERSON_SUBMISSIONS`] do
/// (a common value, not one person's).
pub async fn holding(
    conn: &mut AsyncPgConnection,
    value: &FieldValue,
    project: Option<&ProjectId>,
) -> Result<Option<Vec<SubmissionRow>>, DbError> {
    let rows = page(
        conn,
        &holding_filter(value, project),
        None,
        MAX_PERSON_SUBMISSIONS + 1,
    )
    .await?;
    Ok((rows.len() as i64 <= MAX_PERSON_SUBMISSIONS).then_some(rows))
}

/// What erasing the submissions holding a value did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PersonErasure {
    /// These were erased (their ids, in order).
    Erased(Vec<SubmissionId>),
    NothingHolds,
    /// More than [`MAX_PERSON_SUBMISSIONS`] hold it: a common value, not one person's.
    TooMany,
    /// A delivery of one of them is still owed: nothing was erased.
    DeliveryInProgress {
        submission_id: SubmissionId,
        state: DeliveryState,
    },
}

/// Erases every submission holding `value` (in any folder, of any endpoint), in one
/// transaction, unless a delivery of one is still owed; as [`erase`] does one. What their
/// attempts recorded of the receiver's or mail server's answer (`reply`, `error`: a mail
/// server may name the address it refused) goes too; deliveries, attempts and events
/// stay, without the submission. Their files are detached for the sweep.
pub async fn erase_holding(
    conn: &mut AsyncPgConnection,
    value: &FieldValue,
    project: Option<&ProjectId>,
) -> Result<PersonErasure, DbError> {
    use super::schema::{delivery_attempts, submissions};
    use diesel_async::AsyncConnection;
    let filter = holding_filter(value, project);
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let found: Vec<SubmissionId> = filtered(&filter)
                .select(submissions::id)
                .limit(MAX_PERSON_SUBMISSIONS + 1)
                .load(conn)
                .await?;
            if found.len() as i64 > MAX_PERSON_SUBMISSIONS {
                return Ok(PersonErasure::TooMany);
            }
            // Locked in id order (what another eraser deleted meanwhile drops out).
            let ids: Vec<SubmissionId> = submissions::table
                .filter(submissions::id.eq_any(&found))
                .select(submissions::id)
                .order(submissions::id)
                .for_update()
                .load(conn)
                .await?;
            if ids.is_empty() {
                return Ok(PersonErasure::NothingHolds);
            }
            if let Some((submission_id, state)) = first_owed(conn, &ids).await? {
                return Ok(PersonErasure::DeliveryInProgress {
                    submission_id,
                    state,
                });
            }
            diesel::update(
                delivery_attempts::table.filter(delivery_attempts::submission_id.eq_any(&ids)),
            )
            .set((
                delivery_attempts::reply.eq(None::<String>),
                delivery_attempts::error.eq(None::<String>),
            ))
            .execute(conn)
            .await?;
            delete_erased(conn, &ids).await?;
            Ok(PersonErasure::Erased(ids))
        })
        .await?)
}

/// How many submissions a listing with this filter holds.
pub async fn count(
    conn: &mut AsyncPgConnection,
    filter: &SubmissionFilter,
) -> Result<i64, DbError> {
    Ok(filtered(filter).count().get_result(conn).await?)
}

/// The submissions a filter selects, for listing or counting.
fn filtered<'a>(
    filter: &SubmissionFilter,
) -> super::schema::submissions::BoxedQuery<'a, diesel::pg::Pg> {
    use super::schema::submissions;
    let mut query = submissions::table.into_boxed();
    if let Some(endpoint_id) = &filter.endpoint_id {
        query = query.filter(submissions::endpoint_id.eq(endpoint_id.clone()));
    }
    match (
        &filter.project,
        filter.search.is_some() || filter.value.is_some(),
    ) {
        (None, _) => {}
        (Some(project), false) => {
            query = query
                .filter(submissions::endpoint_id.eq_any(super::endpoints::of_project(project)));
        }
        // A search reads its few matches from the search index and checks each one's
        // endpoint. Written so that no index can serve it: the planner would otherwise
        // AND the matches with a bitmap of every submission of the project's endpoints
        // (a million rows for a tenth of 10 million), slower than the search itself
        // (benches/search.rs, "project key").
        (Some(project), true) => {
            query = query.filter(
                sql::<Bool>("(submissions.endpoint_id || '') IN (SELECT id FROM endpoints WHERE project_id = ")
                    .bind::<Text, _>(project.as_str().to_string())
                    .sql(")"),
            );
        }
    }
    if let Some(spam) = filter.folder.spam() {
        query = query.filter(submissions::spam.eq(spam));
    }
    if let Some(after) = filter.received_after {
        query = query.filter(submissions::received_at.gt(after));
    }
    if let Some(before) = filter.received_before {
        query = query.filter(submissions::received_at.lt(before));
    }
    if let Some(words) = &filter.search {
        query = query.filter(
            sql::<Bool>(SEARCH_VECTOR)
                .sql(" @@ websearch_to_tsquery('simple'::regconfig, ")
                .bind::<Text, _>(words.as_str().to_string())
                .sql(")"),
        );
    }
    if let Some(value) = &filter.value {
        // The index finds the submissions holding the value's words in that order; the
        // values themselves are then compared whole.
        query = query.filter(
            sql::<Bool>(SEARCH_VECTOR)
                .sql(" @@ phraseto_tsquery('simple'::regconfig, ")
                .bind::<Text, _>(value.as_str().to_string())
                .sql(") AND EXISTS (SELECT 1 FROM json_each(submissions.fields) AS f, json_array_elements_text(CASE WHEN json_typeof(f.value) = 'array' THEN f.value ELSE json_build_array(f.value) END) AS v(text) WHERE lower(btrim(v.text)) = lower(")
                .bind::<Text, _>(value.as_str().to_string())
                .sql("))"),
        );
    }
    query
}

/// A submission's words as submissions_search_idx (migration submission_search) holds
/// them: the same expression, so that the planner reads the index.
const SEARCH_VECTOR: &str =
    "json_to_tsvector('simple'::regconfig, submissions.fields, '[\"string\"]'::jsonb)";

static RETENTION_COUNT: SqlText = sql!("retention_expired.sql", "retention_count.sql");
struct RetentionCount;

/// What retention keeps, as of `now`: the server's days for the inbox and for the spam
/// folder (0: kept for ever), which an endpoint's own days replace.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub now: DateTime<Utc>,
    pub days: i32,
    pub spam_days: i32,
}

/// A [`Retention`]'s binds: `now`, days, spam days.
type RetentionBinds = (
    Bind<Timestamptz, DateTime<Utc>>,
    Bind<Integer, i32>,
    Bind<Integer, i32>,
);

impl Retention {
    fn binds(self) -> RetentionBinds {
        (
            bind::<Timestamptz, _>(self.now),
            bind::<Integer, _>(self.days),
            bind::<Integer, _>(self.spam_days),
        )
    }
}

/// How many submissions retention would delete now (retention_count.sql).
pub async fn count_expired(
    conn: &mut AsyncPgConnection,
    retention: Retention,
) -> Result<i64, DbError> {
    Ok(
        Statement::<RetentionCount, BigInt, _>::new(&RETENTION_COUNT, retention.binds())
            .get_result(conn)
            .await?,
    )
}

static RETENTION_DELETE: SqlText = sql!("retention_expired.sql", "retention_delete.sql");
struct RetentionDelete;

/// Deletes up to `batch` expired submissions (retention_delete.sql); returns how many.
pub async fn delete_expired_batch(
    conn: &mut AsyncPgConnection,
    retention: Retention,
    batch: i64,
) -> Result<usize, DbError> {
    let (now, days, spam_days) = retention.binds();
    let deleted: i64 = Statement::<RetentionDelete, BigInt, _>::new(
        &RETENTION_DELETE,
        (now, days, spam_days, bind::<BigInt, _>(batch)),
    )
    .get_result(conn)
    .await?;
    Ok(usize::try_from(deleted).unwrap_or(0))
}
