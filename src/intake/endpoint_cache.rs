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

/// The settings a rule set is compiled from: while an endpoint's are unchanged, the rule
/// set compiled from them serves every refresh of its entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RuleSource {
    max_links: Option<i32>,
    words: Vec<String>,
    patterns: Vec<String>,
    senders: Vec<String>,
}

impl RuleSource {
    fn of(row: &SpamProtectionRow) -> RuleSource {
        let own = |list: &[Option<String>]| list.iter().flatten().cloned().collect::<Vec<_>>();
        RuleSource {
            max_links: row.max_links,
            words: own(&row.blocked_words),
            patterns: own(&row.blocked_patterns),
            senders: own(&row.blocked_senders),
        }
    }
}

/// The endpoints' compiled rules, by endpoint, with what they were compiled from.
/// Compiling costs up to tens of milliseconds of CPU (the blocked words' expression, the
/// patterns' ranges); an entry is read again every `FORMS_ENDPOINT_CACHE_SECONDS`, so a
/// refresh reuses the compiled rules while the settings are the same, and compiles on
/// a blocking thread, never on the runtime's, when they changed.
#[derive(Default)]
struct RulesCache {
    compiled: Mutex<HashMap<EndpointId, (RuleSource, SpamRules)>>,
}

impl RulesCache {
    fn compiled(&self) -> std::sync::MutexGuard<'_, HashMap<EndpointId, (RuleSource, SpamRules)>> {
        // Plain data, left consistent by every critical section.
        self.compiled.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The endpoint's rules as `row` sets them. A stored pattern that does not compile
    /// (written by another program) is a read error, never a rule silently dropped.
    async fn rules(&self, row: &SpamProtectionRow) -> Result<SpamRules, DbError> {
        let source = RuleSource::of(row);
        if let Some((known, rules)) = self.compiled().get(&row.endpoint_id) {
            if *known == source {
                return Ok(rules.clone());
            }
        }
        let compiling = source.clone();
        let rules = tokio::task::spawn_blocking(move || {
            SpamRules::compile(
                compiling.max_links,
                &compiling.words,
                &compiling.patterns,
                &compiling.senders,
            )
        })
        .await
        .map_err(unreadable)?
        .map_err(unreadable)?;
        let mut compiled = self.compiled();
        if compiled.len() >= MAX_ENTRIES {
            compiled.clear();
        }
        compiled.insert(row.endpoint_id.clone(), (source, rules.clone()));
        Ok(rules)
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
    rules: RulesCache,
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
            rules: RulesCache::default(),
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
            Some(((row, has_destinations), protection)) => {
                let protection = match protection {
                    None => None,
                    Some(row) => Some(Protection {
                        rules: self.rules.rules(&row).await?,
                        row,
                    }),
                };
                Some(Arc::new(IntakeEndpoint {
                    row,
                    has_destinations,
                    protection,
                }))
            }
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

/// Rules that cannot be compiled (or whose compiling did not finish) are a stored value
/// this build cannot read.
fn unreadable(error: impl std::error::Error + Send + Sync + 'static) -> DbError {
    DbError::Query(diesel::result::Error::DeserializationError(Box::new(error)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::state::WhenUnreachable;

    fn protection(words: &[&str]) -> SpamProtectionRow {
        SpamProtectionRow {
            endpoint_id: EndpointId::parse("contact").expect("an id"),
            captcha_provider: None,
            captcha_secret: None,
            captcha_min_score: None,
            when_unreachable: WhenUnreachable::Refuse,
            max_links: Some(2),
            blocked_words: words.iter().map(|w| Some(w.to_string())).collect(),
            blocked_patterns: vec![Some("[\u{0430}-\u{044F}]x".to_string())],
            blocked_senders: Vec::new(),
            min_fill_seconds: None,
            akismet: false,
            updated_at: chrono::Utc::now(),
        }
    }

    /// A refresh of an unchanged protection reuses its compiled rules; a change of its
    /// rules compiles them again, and other settings (the time it was updated, the
    /// policy) do not.
    #[tokio::test]
    async fn compiled_rules_are_reused_while_unchanged() {
        let cache = RulesCache::default();
        let first = cache
            .rules(&protection(&["casino"]))
            .await
            .expect("compiles");
        let again = cache
            .rules(&protection(&["casino"]))
            .await
            .expect("compiles");
        assert!(first.same_as(&again), "recompiled unchanged rules");
        let mut other_policy = protection(&["casino"]);
        other_policy.when_unreachable = WhenUnreachable::Spam;
        let reused = cache.rules(&other_policy).await.expect("compiles");
        assert!(first.same_as(&reused));
        let changed = cache
            .rules(&protection(&["viagra"]))
            .await
            .expect("compiles");
        assert!(!first.same_as(&changed), "changed rules reused");
        assert_eq!(
            changed.judge(["buy viagra"].into_iter()),
            vec!["a blocked word"]
        );
        let kept = cache
            .rules(&protection(&["viagra"]))
            .await
            .expect("compiles");
        assert!(changed.same_as(&kept));
    }
}
