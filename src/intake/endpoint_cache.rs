//! The endpoints public intake reads, kept in the process so a submission does not look
//! its endpoint up in the database every time.
//!
//! An entry (a row, or the fact that no endpoint has the id) is trusted for at most
//! `FORMS_ENDPOINT_CACHE_SECONDS`. Every change of an endpoint is also notified on
//! `hymical_endpoint_changed` in the transaction that makes it (db/endpoints.rs); each
//! process's LISTEN connection drops the entry when the notification arrives, and the
//! whole cache when that connection was lost and came back (what was sent meanwhile was
//! missed). The process that made the change drops its entry at once. So a change takes
//! effect everywhere within milliseconds, and within the maximum age if notifications are
//! not getting through.
//!
//! The rows are used for the checks (active, origin, honeypot, redirect) only: the
//! delivery's URL and secret are copied from the endpoints table by the outbox statement
//! itself, so a stale entry can never send a submission to an old URL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::db::models::{EndpointRow, SpamProtectionRow};
use crate::model::spam::SpamRules;

/// An endpoint as intake uses it: its row, whether it has a destination (so that a
/// tripped honeypot's fake receipt says what a real one would), and its protection
/// against spam with its rules compiled.
#[derive(Debug)]
pub struct IntakeEndpoint {
    pub row: EndpointRow,
    pub has_destinations: bool,
    pub protection: Option<Protection>,
}

/// An endpoint's protection against spam as intake applies it.
#[derive(Debug)]
pub struct Protection {
    pub row: SpamProtectionRow,
    pub rules: SpamRules,
}

impl Protection {
    /// Compiles the stored rules; a stored pattern that does not compile (written by
    /// another program) is a read error, never a rule silently dropped.
    fn compile(row: SpamProtectionRow) -> Result<Protection, DbError> {
        let own = |list: &[Option<String>]| list.iter().flatten().cloned().collect::<Vec<_>>();
        let rules = SpamRules::compile(
            row.max_links,
            &own(&row.blocked_words),
            &own(&row.blocked_patterns),
            &own(&row.blocked_senders),
        )
        .map_err(|error| {
            DbError::Query(diesel::result::Error::DeserializationError(Box::new(error)))
        })?;
        Ok(Protection { row, rules })
    }
}

impl std::ops::Deref for IntakeEndpoint {
    type Target = EndpointRow;

    fn deref(&self) -> &EndpointRow {
        &self.row
    }
}
use crate::db::{self, Db, DbError};
use crate::model::ids::EndpointId;

/// More ids than this (a scan of random ids, say) and the cache starts over rather than
/// grow: memory stays bounded whatever clients send.
const MAX_ENTRIES: usize = 10_000;

pub struct EndpointCache {
    max_age: Duration,
    entries: Mutex<HashMap<EndpointId, Entry>>,
    /// Bumped by every invalidation: a lookup that started before one does not store what
    /// it read, which may be the old row.
    generation: AtomicU64,
}

struct Entry {
    row: Option<Arc<IntakeEndpoint>>,
    read_at: Instant,
}

impl EndpointCache {
    pub fn new(max_age: Duration) -> EndpointCache {
        EndpointCache {
            max_age,
            entries: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<EndpointId, Entry>> {
        // The map holds plain data and every critical section leaves it consistent.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The endpoint with this id, `None` when there is none: from the cache while the
    /// entry is young enough, else from the database.
    pub async fn find(
        &self,
        pool: &Db,
        id: &EndpointId,
    ) -> Result<Option<Arc<IntakeEndpoint>>, DbError> {
        if let Some(entry) = self.entries().get(id) {
            if entry.read_at.elapsed() < self.max_age {
                return Ok(entry.row.clone());
            }
        }
        let generation = self.generation.load(Ordering::Acquire);
        let read_at = Instant::now();
        let found = pool
            .run(async |conn| {
                let Some(endpoint) = db::endpoints::find_for_intake(conn, id).await? else {
                    return Ok(None);
                };
                let protection = db::spam::protection(conn, id).await?;
                Ok(Some((endpoint, protection)))
            })
            .await?;
        let row = match found {
            None => None,
            Some(((row, has_destinations), protection)) => Some(Arc::new(IntakeEndpoint {
                row,
                has_destinations,
                protection: protection.map(Protection::compile).transpose()?,
            })),
        };
        let mut entries = self.entries();
        if self.generation.load(Ordering::Acquire) == generation {
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
            entries.insert(
                id.clone(),
                Entry {
                    row: row.clone(),
                    read_at,
                },
            );
        }
        Ok(row)
    }

    /// Forgets one endpoint (it changed).
    pub fn invalidate(&self, id: &str) {
        let mut entries = self.entries();
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(id) = EndpointId::parse(id) {
            entries.remove(&id);
        }
    }

    /// Forgets every endpoint (notifications may have been missed).
    pub fn clear(&self) {
        let mut entries = self.entries();
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.clear();
    }
}
