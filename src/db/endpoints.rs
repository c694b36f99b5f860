//! Queries on `endpoints`.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::endpoints;
use super::DbError;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = endpoints)]
pub struct EndpointRow {
    pub id: String,
    pub name: String,
    pub is_active: bool,
    pub created_at: DateTime<Utc>,
    pub webhook_url: Option<String>,
    pub webhook_secret: Option<String>,
    pub redirect_url: Option<String>,
    /// The column is `text[]` with a CHECK against NULL elements; Diesel's generated type
    /// still admits them, so they are filtered out on read.
    pub allowed_origins: Vec<Option<String>>,
    pub honeypot_field: Option<String>,
}

impl EndpointRow {
    pub fn allowed_origins(&self) -> impl Iterator<Item = &str> {
        self.allowed_origins.iter().flatten().map(String::as_str)
    }

    pub fn has_webhook(&self) -> bool {
        self.webhook_url.is_some()
    }
}

#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = endpoints)]
pub struct NewEndpoint {
    pub id: String,
    pub name: String,
    pub is_active: bool,
    pub created_at: DateTime<Utc>,
    pub webhook_url: Option<String>,
    pub webhook_secret: Option<String>,
    pub redirect_url: Option<String>,
    pub allowed_origins: Vec<Option<String>>,
    pub honeypot_field: Option<String>,
}

pub async fn find(conn: &mut AsyncPgConnection, id: &str) -> Result<Option<EndpointRow>, DbError> {
    Ok(endpoints::table
        .find(id)
        .select(EndpointRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

pub async fn insert(conn: &mut AsyncPgConnection, endpoint: &NewEndpoint) -> Result<(), DbError> {
    diesel::insert_into(endpoints::table)
        .values(endpoint)
        .execute(conn)
        .await?;
    Ok(())
}
