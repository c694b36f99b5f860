//! DataLoaders for every nested object and list, so a page costs a constant number of
//! queries however many rows it has. One set per request (no cache outlives a request).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_graphql::dataloader::{DataLoader, HashMapCache, Loader};

use crate::app::AppState;
use crate::db::deliveries::{AttemptRow, DeliveryRow};
use crate::db::endpoints::EndpointRow;
use crate::db::submissions::SubmissionRow;
use crate::db::{self, DbError};

/// The loaders' error: shared, because one failed batch fails every field waiting on it.
pub type LoadError = Arc<DbError>;

pub struct Loaders {
    pub endpoints: DataLoader<EndpointLoader, HashMapCache>,
    pub submissions: DataLoader<SubmissionLoader, HashMapCache>,
    /// `None` for a submission without a delivery (so the answer is cached too).
    pub delivery_by_submission: DataLoader<DeliveryBySubmissionLoader, HashMapCache>,
    pub attempts: DataLoader<AttemptLoader, HashMapCache>,
}

/// How long a loader waits for more keys before it queries: long enough for the items of
/// one list level to queue their keys together, short against a request's duration.
const BATCH_DELAY: Duration = Duration::from_millis(2);

/// A loader with a per-request cache (a key asked for twice is loaded once).
fn loader<T: Loader<String>>(inner: T) -> DataLoader<T, HashMapCache> {
    DataLoader::with_cache(inner, tokio::spawn, HashMapCache::default()).delay(BATCH_DELAY)
}

impl Loaders {
    pub fn new(app: &AppState) -> Loaders {
        Loaders {
            endpoints: loader(EndpointLoader(app.clone())),
            submissions: loader(SubmissionLoader(app.clone())),
            delivery_by_submission: loader(DeliveryBySubmissionLoader(app.clone())),
            attempts: loader(AttemptLoader(app.clone())),
        }
    }
}

pub struct EndpointLoader(AppState);
pub struct SubmissionLoader(AppState);
pub struct DeliveryBySubmissionLoader(AppState);
pub struct AttemptLoader(AppState);

impl Loader<String> for EndpointLoader {
    type Value = EndpointRow;
    type Error = LoadError;

    async fn load(&self, keys: &[String]) -> Result<HashMap<String, EndpointRow>, LoadError> {
        let mut conn = self
            .0
            .pool
            .get()
            .await
            .map_err(|e| Arc::new(DbError::from(e)))?;
        let rows = db::endpoints::find_many(&mut conn, keys)
            .await
            .map_err(Arc::new)?;
        Ok(rows.into_iter().map(|row| (row.id.clone(), row)).collect())
    }
}

impl Loader<String> for SubmissionLoader {
    type Value = SubmissionRow;
    type Error = LoadError;

    async fn load(&self, keys: &[String]) -> Result<HashMap<String, SubmissionRow>, LoadError> {
        let mut conn = self
            .0
            .pool
            .get()
            .await
            .map_err(|e| Arc::new(DbError::from(e)))?;
        let rows = db::submissions::find_many(&mut conn, keys)
            .await
            .map_err(Arc::new)?;
        Ok(rows.into_iter().map(|row| (row.id.clone(), row)).collect())
    }
}

impl Loader<String> for DeliveryBySubmissionLoader {
    type Value = Option<DeliveryRow>;
    type Error = LoadError;

    async fn load(
        &self,
        keys: &[String],
    ) -> Result<HashMap<String, Option<DeliveryRow>>, LoadError> {
        let mut conn = self
            .0
            .pool
            .get()
            .await
            .map_err(|e| Arc::new(DbError::from(e)))?;
        let rows = db::deliveries::for_submissions(&mut conn, keys)
            .await
            .map_err(Arc::new)?;
        let mut found: HashMap<String, Option<DeliveryRow>> =
            keys.iter().map(|key| (key.clone(), None)).collect();
        for row in rows {
            if let Some(submission_id) = row.submission_id.clone() {
                found.insert(submission_id, Some(row));
            }
        }
        Ok(found)
    }
}

/// A delivery's attempts, in number order (keyed by delivery id).
impl Loader<String> for AttemptLoader {
    type Value = Vec<AttemptRow>;
    type Error = LoadError;

    async fn load(&self, keys: &[String]) -> Result<HashMap<String, Vec<AttemptRow>>, LoadError> {
        let mut conn = self
            .0
            .pool
            .get()
            .await
            .map_err(|e| Arc::new(DbError::from(e)))?;
        let rows = db::deliveries::attempts_for(&mut conn, keys)
            .await
            .map_err(Arc::new)?;
        // Every key gets an entry, an empty history included, so that it is cached.
        let mut by_delivery: HashMap<String, Vec<AttemptRow>> =
            keys.iter().map(|key| (key.clone(), Vec::new())).collect();
        for row in rows {
            by_delivery
                .entry(row.delivery_id.clone())
                .or_default()
                .push(row);
        }
        Ok(by_delivery)
    }
}

/// Loads, in one batch per loader, what the selection below a list of deliveries or
/// submissions will ask for, so that the nested fields find it cached. A DataLoader alone
/// batches only the keys that arrive within its delay; priming from the look-ahead makes
/// the number of queries independent of how fast the items resolve.
pub async fn prime_deliveries(
    ctx: &async_graphql::Context<'_>,
    node: async_graphql::Lookahead<'_>,
    rows: &[DeliveryRow],
) -> Result<(), LoadError> {
    let loaders = ctx.data_unchecked::<Loaders>();
    if rows.is_empty() {
        return Ok(());
    }
    if node.field("endpoint").exists() {
        loaders
            .endpoints
            .load_many(rows.iter().map(|row| row.endpoint_id.clone()))
            .await?;
    }
    if node.field("attemptHistory").exists() {
        loaders
            .attempts
            .load_many(rows.iter().map(|row| row.id.clone()))
            .await?;
    }
    let submission = node.field("submission");
    if submission.exists() {
        let submissions = loaders
            .submissions
            .load_many(rows.iter().filter_map(|row| row.submission_id.clone()))
            .await?;
        let submissions: Vec<SubmissionRow> = submissions.into_values().collect();
        if submission.field("endpoint").exists() {
            loaders
                .endpoints
                .load_many(submissions.iter().map(|row| row.endpoint_id.clone()))
                .await?;
        }
        if submission.field("delivery").exists() {
            loaders
                .delivery_by_submission
                .load_many(submissions.iter().map(|row| row.id.clone()))
                .await?;
        }
    }
    Ok(())
}

/// [`prime_deliveries`] for a list of submissions.
pub async fn prime_submissions(
    ctx: &async_graphql::Context<'_>,
    node: async_graphql::Lookahead<'_>,
    rows: &[SubmissionRow],
) -> Result<(), LoadError> {
    let loaders = ctx.data_unchecked::<Loaders>();
    if rows.is_empty() {
        return Ok(());
    }
    if node.field("endpoint").exists() {
        loaders
            .endpoints
            .load_many(rows.iter().map(|row| row.endpoint_id.clone()))
            .await?;
    }
    let delivery = node.field("delivery");
    if delivery.exists() {
        let deliveries = loaders
            .delivery_by_submission
            .load_many(rows.iter().map(|row| row.id.clone()))
            .await?;
        let deliveries: Vec<DeliveryRow> = deliveries.into_values().flatten().collect();
        if delivery.field("attemptHistory").exists() {
            loaders
                .attempts
                .load_many(deliveries.iter().map(|row| row.id.clone()))
                .await?;
        }
        if delivery.field("endpoint").exists() {
            loaders
                .endpoints
                .load_many(deliveries.iter().map(|row| row.endpoint_id.clone()))
                .await?;
        }
    }
    Ok(())
}
