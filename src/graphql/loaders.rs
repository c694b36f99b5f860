//! DataLoaders for every nested object and list, so a page costs a constant number of
//! queries however many rows it has. One set per request (no cache outlives a request).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_graphql::dataloader::{DataLoader, HashMapCache, Loader};

use crate::db::deliveries::DeliveryCounts;
use crate::db::models::{
    AttemptRow, DeliveryRow, DestinationRow, EndpointRow, SpamProtectionRow, SubmissionRow,
};
use crate::db::{self, Db, DbError};
use crate::model::ids::{DeliveryId, DestinationId, EndpointId, SubmissionId};
use crate::model::spam::SubmissionFolder;

/// The loaders' error: shared, because one failed batch fails every field waiting on it.
pub type LoadError = Arc<DbError>;

pub struct Loaders {
    pub endpoints: DataLoader<EndpointLoader, HashMapCache>,
    pub submissions: DataLoader<SubmissionLoader, HashMapCache>,
    /// A submission's deliveries, one per destination, in the destinations' order (empty
    /// for a submission without any, so the answer is cached too).
    pub deliveries_of_submission: DataLoader<DeliveriesOfSubmissionLoader, HashMapCache>,
    pub attempts: DataLoader<AttemptLoader, HashMapCache>,
    /// The first page of an endpoint's deliveries, keyed by (endpoint id, rows to fetch).
    pub endpoint_deliveries: DataLoader<EndpointDeliveriesLoader, HashMapCache>,
    /// The first page of an endpoint's submissions, keyed likewise.
    pub endpoint_submissions: DataLoader<EndpointSubmissionsLoader, HashMapCache>,
    pub delivery_counts: DataLoader<DeliveryCountsLoader, HashMapCache>,
    /// An endpoint's destinations not removed, in order (keyed by endpoint id).
    pub destinations_of_endpoint: DataLoader<DestinationsOfEndpointLoader, HashMapCache>,
    /// Destinations by id, removed ones included.
    pub destinations: DataLoader<DestinationLoader, HashMapCache>,
    /// An endpoint's protection against spam (keyed by endpoint id; none: no entry).
    pub spam_protection: DataLoader<SpamProtectionLoader, HashMapCache>,
}

/// How long a loader waits for more keys before it queries: long enough for the items of
/// one list level to queue their keys together, short against a request's duration.
const BATCH_DELAY: Duration = Duration::from_millis(2);

/// A loader with a per-request cache (a key asked for twice is loaded once).
fn loader<K, T>(inner: T) -> DataLoader<T, HashMapCache>
where
    K: Send + Sync + std::hash::Hash + Eq + Clone + 'static,
    T: Loader<K>,
{
    DataLoader::with_cache(inner, tokio::spawn, HashMapCache::default()).delay(BATCH_DELAY)
}

impl Loaders {
    /// For a subscription, which lives for hours: batching without a cache, so each event
    /// resolves nested objects as they are now.
    pub fn uncached(db: &Db) -> Loaders {
        let loaders = Loaders::new(db);
        loaders.endpoints.enable_all_cache(false);
        loaders.submissions.enable_all_cache(false);
        loaders.deliveries_of_submission.enable_all_cache(false);
        loaders.attempts.enable_all_cache(false);
        loaders.endpoint_deliveries.enable_all_cache(false);
        loaders.endpoint_submissions.enable_all_cache(false);
        loaders.delivery_counts.enable_all_cache(false);
        loaders.destinations_of_endpoint.enable_all_cache(false);
        loaders.destinations.enable_all_cache(false);
        loaders.spam_protection.enable_all_cache(false);
        loaders
    }

    pub fn new(db: &Db) -> Loaders {
        Loaders {
            endpoints: loader(EndpointLoader(db.clone())),
            submissions: loader(SubmissionLoader(db.clone())),
            deliveries_of_submission: loader(DeliveriesOfSubmissionLoader(db.clone())),
            attempts: loader(AttemptLoader(db.clone())),
            endpoint_deliveries: loader(EndpointDeliveriesLoader(db.clone())),
            endpoint_submissions: loader(EndpointSubmissionsLoader(db.clone())),
            delivery_counts: loader(DeliveryCountsLoader(db.clone())),
            destinations_of_endpoint: loader(DestinationsOfEndpointLoader(db.clone())),
            destinations: loader::<DestinationId, _>(DestinationLoader(db.clone())),
            spam_protection: loader(SpamProtectionLoader(db.clone())),
        }
    }
}

pub struct EndpointLoader(Db);
pub struct SubmissionLoader(Db);
pub struct DeliveriesOfSubmissionLoader(Db);
pub struct AttemptLoader(Db);
pub struct EndpointDeliveriesLoader(Db);
pub struct EndpointSubmissionsLoader(Db);
/// An endpoint's delivery counts (keyed by endpoint id).
pub struct DeliveryCountsLoader(Db);
pub struct DestinationsOfEndpointLoader(Db);
pub struct DestinationLoader(Db);
pub struct SpamProtectionLoader(Db);

/// Every key with an empty value, so that keys without rows are cached too.
fn empty_for<K: Clone + Eq + std::hash::Hash, V>(keys: &[K]) -> HashMap<K, Vec<V>> {
    keys.iter().map(|key| (key.clone(), Vec::new())).collect()
}

/// The loader `$loader` of one row per key: `$query` loads the rows of a batch of keys,
/// `$key_field` is a row's key.
macro_rules! row_per_key {
    ($loader:ident: $key:ty => $row:ty, $query:path, $key_field:ident) => {
        impl Loader<$key> for $loader {
            type Value = $row;
            type Error = LoadError;

            async fn load(&self, keys: &[$key]) -> Result<HashMap<$key, $row>, LoadError> {
                let rows = self
                    .0
                    .run(async |conn| $query(conn, keys).await)
                    .await
                    .map_err(Arc::new)?;
                Ok(rows
                    .into_iter()
                    .map(|row| (row.$key_field.clone(), row))
                    .collect())
            }
        }
    };
}

/// The loader `$loader` of every row of a key, in the order `$query` answers them, and
/// an empty list for a key without any (so that it is cached too).
macro_rules! rows_per_key {
    ($loader:ident: $key:ty => $row:ty, $query:path, $key_field:ident) => {
        impl Loader<$key> for $loader {
            type Value = Vec<$row>;
            type Error = LoadError;

            async fn load(&self, keys: &[$key]) -> Result<HashMap<$key, Vec<$row>>, LoadError> {
                let rows = self
                    .0
                    .run(async |conn| $query(conn, keys).await)
                    .await
                    .map_err(Arc::new)?;
                let mut found = empty_for(keys);
                for row in rows {
                    found.entry(row.$key_field.clone()).or_default().push(row);
                }
                Ok(found)
            }
        }
    };
}

/// A key of the first-page loaders: (endpoint id, how many rows to fetch).
pub type FirstPage = (EndpointId, i64);

/// Groups first-page keys by page size: one statement per size.
fn by_limit(keys: &[FirstPage]) -> HashMap<i64, Vec<EndpointId>> {
    let mut groups: HashMap<i64, Vec<EndpointId>> = HashMap::new();
    for (endpoint_id, limit) in keys {
        groups.entry(*limit).or_default().push(endpoint_id.clone());
    }
    groups
}

/// Files the rows of one page size under their (endpoint, size) keys.
fn file_pages<R>(
    pages: &mut HashMap<FirstPage, Vec<R>>,
    limit: i64,
    rows: Vec<R>,
    endpoint_of: impl Fn(&R) -> &EndpointId,
) {
    for row in rows {
        pages
            .entry((endpoint_of(&row).clone(), limit))
            .or_default()
            .push(row);
    }
}

impl Loader<FirstPage> for EndpointDeliveriesLoader {
    type Value = Vec<DeliveryRow>;
    type Error = LoadError;

    async fn load(
        &self,
        keys: &[FirstPage],
    ) -> Result<HashMap<FirstPage, Vec<DeliveryRow>>, LoadError> {
        self.0
            .run(async |conn| {
                let mut pages = empty_for(keys);
                for (limit, endpoint_ids) in by_limit(keys) {
                    let rows = db::deliveries::first_pages(conn, &endpoint_ids, limit).await?;
                    file_pages(&mut pages, limit, rows, |row| &row.endpoint_id);
                }
                Ok(pages)
            })
            .await
            .map_err(Arc::new)
    }
}

impl Loader<FirstPage> for EndpointSubmissionsLoader {
    type Value = Vec<SubmissionRow>;
    type Error = LoadError;

    async fn load(
        &self,
        keys: &[FirstPage],
    ) -> Result<HashMap<FirstPage, Vec<SubmissionRow>>, LoadError> {
        self.0
            .run(async |conn| {
                let mut pages = empty_for(keys);
                for (limit, endpoint_ids) in by_limit(keys) {
                    // An endpoint's own listing is its inbox; the spam folder is listed through
                    // `Query.submissions(filter: {folder: SPAM})`.
                    let rows = db::submissions::first_pages(
                        conn,
                        &endpoint_ids,
                        limit,
                        SubmissionFolder::Inbox,
                    )
                    .await?;
                    file_pages(&mut pages, limit, rows, |row| &row.endpoint_id);
                }
                Ok(pages)
            })
            .await
            .map_err(Arc::new)
    }
}

row_per_key!(EndpointLoader: EndpointId => EndpointRow, db::endpoints::find_many, id);

row_per_key!(SubmissionLoader: SubmissionId => SubmissionRow, db::submissions::find_many, id);

impl Loader<SubmissionId> for DeliveriesOfSubmissionLoader {
    type Value = Vec<DeliveryRow>;
    type Error = LoadError;

    async fn load(
        &self,
        keys: &[SubmissionId],
    ) -> Result<HashMap<SubmissionId, Vec<DeliveryRow>>, LoadError> {
        let rows = self
            .0
            .run(async |conn| db::deliveries::for_submissions(conn, keys).await)
            .await
            .map_err(Arc::new)?;
        let mut found = empty_for(keys);
        for row in rows {
            if let Some(submission_id) = row.submission_id.clone() {
                found.entry(submission_id).or_default().push(row);
            }
        }
        Ok(found)
    }
}

impl Loader<EndpointId> for DeliveryCountsLoader {
    type Value = DeliveryCounts;
    type Error = LoadError;

    async fn load(
        &self,
        keys: &[EndpointId],
    ) -> Result<HashMap<EndpointId, DeliveryCounts>, LoadError> {
        let rows = self
            .0
            .run(async |conn| db::deliveries::count_by_state_for(conn, keys).await)
            .await
            .map_err(Arc::new)?;
        Ok(rows.into_iter().collect())
    }
}

rows_per_key!(
    DestinationsOfEndpointLoader: EndpointId => DestinationRow,
    db::destinations::of_endpoints,
    endpoint_id
);

row_per_key!(
    SpamProtectionLoader: EndpointId => SpamProtectionRow,
    db::spam::protections,
    endpoint_id
);

row_per_key!(DestinationLoader: DestinationId => DestinationRow, db::destinations::find_many, id);

rows_per_key!(AttemptLoader: DeliveryId => AttemptRow, db::deliveries::attempts_for, delivery_id);

/// Loads `keys` through `loader` now and puts the results in `cache`. Unlike `load_many`,
/// this waits for no batching delay: the keys are all known.
async fn prime<K, T>(cache: &DataLoader<T, HashMapCache>, keys: Vec<K>) -> Result<(), LoadError>
where
    K: Send + Sync + std::hash::Hash + Eq + Ord + Clone + 'static,
    T: Loader<K, Error = LoadError>,
{
    let mut keys = keys;
    keys.sort();
    keys.dedup();
    if keys.is_empty() {
        return Ok(());
    }
    let values = cache.loader().load(&keys).await?;
    cache.feed_many(values).await;
    Ok(())
}

/// The keys for a nested field's loader, or none when the query does not select it.
fn keys_if<K>(field: &async_graphql::Lookahead<'_>, keys: impl Iterator<Item = K>) -> Vec<K> {
    if field.exists() {
        keys.collect()
    } else {
        Vec::new()
    }
}

/// Loads, one query per loader and level, what the selection below a list of deliveries
/// or submissions will ask for, so that the nested fields find it cached. A DataLoader on
/// its own batches only the keys that arrive within its delay; priming from the look-ahead
/// makes the number of queries independent of how fast the items resolve.
pub async fn prime_deliveries(
    ctx: &async_graphql::Context<'_>,
    node: async_graphql::Lookahead<'_>,
    rows: &[DeliveryRow],
) -> Result<(), LoadError> {
    let loaders = ctx.data_unchecked::<Loaders>();
    let submission = node.field("submission");
    let submission_ids = keys_if(
        &submission,
        rows.iter().filter_map(|row| row.submission_id.clone()),
    );
    let endpoint_ids = keys_if(
        &node.field("endpoint"),
        rows.iter().map(|row| row.endpoint_id.clone()),
    );
    let primed_endpoints: std::collections::HashSet<EndpointId> =
        endpoint_ids.iter().cloned().collect();
    futures_util::try_join!(
        prime(&loaders.endpoints, endpoint_ids),
        prime(
            &loaders.attempts,
            keys_if(
                &node.field("attemptHistory"),
                rows.iter().map(|row| row.id.clone())
            )
        ),
        prime_destinations(loaders, node.field("destination"), rows),
        prime(&loaders.submissions, submission_ids.clone()),
    )?;
    if submission.exists() {
        let submissions: Vec<SubmissionRow> = loaders
            .submissions
            .load_many(submission_ids)
            .await?
            .into_values()
            .collect();
        // Endpoints already primed at the first level are cached; load only the others.
        let endpoint_ids = keys_if(
            &submission.field("endpoint"),
            submissions
                .iter()
                .map(|row| row.endpoint_id.clone())
                .filter(|id| !primed_endpoints.contains(id)),
        );
        let delivery_keys = keys_if(
            &either(submission.field("delivery"), submission.field("deliveries")),
            submissions.iter().map(|row| row.id.clone()),
        );
        futures_util::try_join!(
            prime(&loaders.endpoints, endpoint_ids),
            prime(&loaders.deliveries_of_submission, delivery_keys),
        )?;
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
    let delivery = either(node.field("delivery"), node.field("deliveries"));
    let submission_ids = keys_if(&delivery, rows.iter().map(|row| row.id.clone()));
    futures_util::try_join!(
        prime(
            &loaders.endpoints,
            keys_if(
                &node.field("endpoint"),
                rows.iter().map(|row| row.endpoint_id.clone())
            )
        ),
        prime(&loaders.deliveries_of_submission, submission_ids.clone()),
    )?;
    if delivery.exists() {
        let deliveries: Vec<DeliveryRow> = loaders
            .deliveries_of_submission
            .load_many(submission_ids)
            .await?
            .into_values()
            .flatten()
            .collect();
        futures_util::try_join!(
            prime(
                &loaders.attempts,
                keys_if(
                    &delivery.field("attemptHistory"),
                    deliveries.iter().map(|row| row.id.clone())
                )
            ),
            prime(
                &loaders.endpoints,
                keys_if(
                    &delivery.field("endpoint"),
                    deliveries.iter().map(|row| row.endpoint_id.clone())
                )
            ),
            prime_destinations(loaders, delivery.field("destination"), &deliveries),
        )?;
    }
    Ok(())
}

/// The look-ahead of whichever of two fields the query selects (`delivery` and
/// `deliveries` read the same loader): the first when both are.
fn either<'a>(
    first: async_graphql::Lookahead<'a>,
    second: async_graphql::Lookahead<'a>,
) -> async_graphql::Lookahead<'a> {
    if first.exists() {
        first
    } else {
        second
    }
}

/// Primes what `Delivery.destination` of `rows` reads: destinations by id.
async fn prime_destinations(
    loaders: &Loaders,
    field: async_graphql::Lookahead<'_>,
    rows: &[DeliveryRow],
) -> Result<(), LoadError> {
    let ids = keys_if(
        &field,
        rows.iter().filter_map(|row| row.destination_id.clone()),
    );
    prime(&loaders.destinations, ids).await
}
