//! DataLoaders for every nested object and list, so a page costs a constant number of
//! queries however many rows it has. One set per request (no cache outlives a request).

use std::collections::HashMap;
use std::sync::Arc;

use async_graphql::dataloader::{DataLoader, Loader};

use crate::app::AppState;
use crate::db::deliveries::{AttemptRow, DeliveryRow};
use crate::db::endpoints::EndpointRow;
use crate::db::submissions::SubmissionRow;
use crate::db::{self, DbError};

/// The loaders' error: shared, because one failed batch fails every field waiting on it.
pub type LoadError = Arc<DbError>;

pub struct Loaders {
    pub endpoints: DataLoader<EndpointLoader>,
    pub submissions: DataLoader<SubmissionLoader>,
    pub delivery_by_submission: DataLoader<DeliveryBySubmissionLoader>,
    pub attempts: DataLoader<AttemptLoader>,
}

impl Loaders {
    pub fn new(app: &AppState) -> Loaders {
        Loaders {
            endpoints: DataLoader::new(EndpointLoader(app.clone()), tokio::spawn),
            submissions: DataLoader::new(SubmissionLoader(app.clone()), tokio::spawn),
            delivery_by_submission: DataLoader::new(
                DeliveryBySubmissionLoader(app.clone()),
                tokio::spawn,
            ),
            attempts: DataLoader::new(AttemptLoader(app.clone()), tokio::spawn),
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
    type Value = DeliveryRow;
    type Error = LoadError;

    async fn load(&self, keys: &[String]) -> Result<HashMap<String, DeliveryRow>, LoadError> {
        let mut conn = self
            .0
            .pool
            .get()
            .await
            .map_err(|e| Arc::new(DbError::from(e)))?;
        let rows = db::deliveries::for_submissions(&mut conn, keys)
            .await
            .map_err(Arc::new)?;
        Ok(rows
            .into_iter()
            .filter_map(|row| Some((row.submission_id.clone()?, row)))
            .collect())
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
        let mut by_delivery: HashMap<String, Vec<AttemptRow>> = HashMap::new();
        for row in rows {
            by_delivery
                .entry(row.delivery_id.clone())
                .or_default()
                .push(row);
        }
        Ok(by_delivery)
    }
}
