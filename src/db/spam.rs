//! The spam folder and what judges it: an endpoint's protection settings, the captcha
//! tokens already seen, the form stamps already spent, and an operator's verdicts.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamptz};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::models::{SpamProtectionRow, SubmissionRow};
use super::schema::{captcha_tokens_seen, endpoint_spam_protection, submissions};
use super::statement::{bind, sql, SqlText, Statement};
use super::DbError;
use crate::model::ids::{EndpointId, SubmissionId};

/// An endpoint's protection, if it has any.
pub async fn protection(
    conn: &mut AsyncPgConnection,
    endpoint_id: &EndpointId,
) -> Result<Option<SpamProtectionRow>, DbError> {
    Ok(endpoint_spam_protection::table
        .find(endpoint_id)
        .select(SpamProtectionRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The protections of these endpoints (those that have one).
pub async fn protections(
    conn: &mut AsyncPgConnection,
    endpoint_ids: &[EndpointId],
) -> Result<Vec<SpamProtectionRow>, DbError> {
    Ok(endpoint_spam_protection::table
        .filter(endpoint_spam_protection::endpoint_id.eq_any(endpoint_ids))
        .select(SpamProtectionRow::as_select())
        .load(conn)
        .await?)
}

/// Sets an endpoint's protection (`None`: removes it), keeping the captcha secret it has
/// when `keep_secret` (the operator changed other settings and sent no new secret), and
/// tells every process's intake. Answers what is stored; `Ok(None)` for a protection
/// removed. The endpoint's row is locked first, so a concurrent delete either waits for
/// this or makes it fail on the foreign key.
pub async fn set_protection(
    conn: &mut AsyncPgConnection,
    endpoint_id: &EndpointId,
    row: Option<SpamProtectionRow>,
    keep_secret: bool,
) -> Result<Option<SpamProtectionRow>, DbError> {
    let endpoint_id = endpoint_id.clone();
    Ok(conn
        .transaction::<_, diesel::result::Error, _>(async move |conn| {
            let stored = match row {
                None => {
                    diesel::delete(endpoint_spam_protection::table.find(&endpoint_id))
                        .execute(conn)
                        .await?;
                    None
                }
                Some(mut row) => {
                    if keep_secret {
                        let kept: Option<Option<String>> = endpoint_spam_protection::table
                            .find(&endpoint_id)
                            .select(endpoint_spam_protection::captcha_secret)
                            .for_update()
                            .first(conn)
                            .await
                            .optional()?;
                        row.captcha_secret = kept.flatten();
                    }
                    Some(
                        diesel::insert_into(endpoint_spam_protection::table)
                            .values(&row)
                            .on_conflict(endpoint_spam_protection::endpoint_id)
                            .do_update()
                            .set(&row)
                            .returning(SpamProtectionRow::as_returning())
                            .get_result(conn)
                            .await?,
                    )
                }
            };
            super::endpoint_events::notify_changed(conn, &endpoint_id).await?;
            Ok(stored)
        })
        .await?)
}

/// Records a captcha token as presented (its digest). `false`: it was seen before.
pub async fn first_sight_of_token(
    conn: &mut AsyncPgConnection,
    token_digest: &str,
    now: DateTime<Utc>,
) -> Result<bool, DbError> {
    let inserted = diesel::insert_into(captcha_tokens_seen::table)
        .values((
            captcha_tokens_seen::token_digest.eq(token_digest),
            captcha_tokens_seen::seen_at.eq(now),
        ))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    Ok(inserted == 1)
}

/// Spends a form stamp (its digest), remembered until `expires_at`. `false`: it was spent
/// before, by any process.
pub async fn spend_form_stamp(
    conn: &mut AsyncPgConnection,
    stamp_digest: &str,
    expires_at: DateTime<Utc>,
) -> Result<bool, DbError> {
    let inserted = diesel::sql_query(include_str!("sql/spend_form_stamp.sql"))
        .bind::<Text, _>(stamp_digest)
        .bind::<Timestamptz, _>(expires_at)
        .execute(conn)
        .await?;
    Ok(inserted == 1)
}

/// Forgets up to `limit` spent form stamps that expired before `before`; returns how many.
pub async fn forget_spent_form_stamps(
    conn: &mut AsyncPgConnection,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<usize, DbError> {
    Ok(
        diesel::sql_query(include_str!("sql/forget_spent_form_stamps.sql"))
            .bind::<Timestamptz, _>(before)
            .bind::<BigInt, _>(limit)
            .execute(conn)
            .await?,
    )
}

/// Forgets up to `limit` tokens seen before `before`; returns how many.
pub async fn forget_tokens(
    conn: &mut AsyncPgConnection,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<usize, DbError> {
    Ok(diesel::sql_query(
        "DELETE FROM captcha_tokens_seen WHERE token_digest IN \
         (SELECT token_digest FROM captcha_tokens_seen WHERE seen_at < $1 LIMIT $2)",
    )
    .bind::<Timestamptz, _>(before)
    .bind::<BigInt, _>(limit)
    .execute(conn)
    .await?)
}

static RELEASE_SPAM: SqlText = sql!("release_spam.sql", with_events);
struct ReleaseSpam;

/// What marking a submission not spam did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// It left the spam folder and this many deliveries were queued.
    Released { queued: i64 },
    /// It was not in the spam folder (never was, or marked not spam already): nothing
    /// was queued.
    NotSpam,
}

/// Marks a spam submission not spam and queues its deliveries, in one statement
/// (release_spam.sql).
pub async fn release(
    conn: &mut AsyncPgConnection,
    id: &SubmissionId,
    now: Option<DateTime<Utc>>,
) -> Result<Release, DbError> {
    let (released, queued, _notified): (i64, i64, i64) =
        Statement::<ReleaseSpam, (BigInt, BigInt, BigInt), _>::new(
            &RELEASE_SPAM,
            (
                bind::<Text, _>(id.as_str()),
                bind::<Nullable<Timestamptz>, _>(now),
            ),
        )
        .get_result(conn)
        .await?;
    Ok(if released == 1 {
        Release::Released { queued }
    } else {
        Release::NotSpam
    })
}

/// Marks an accepted submission spam, with `reason`; answers it as it is now (`None`:
/// no such submission). One already in the spam folder is answered unchanged. Its
/// deliveries are left as they are: what was sent cannot be recalled.
pub async fn mark_spam(
    conn: &mut AsyncPgConnection,
    id: &SubmissionId,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<Option<(SubmissionRow, bool)>, DbError> {
    let marked: Option<SubmissionRow> = diesel::update(
        submissions::table
            .find(id)
            .filter(submissions::spam.eq(false)),
    )
    .set((
        submissions::spam.eq(true),
        submissions::spam_reasons.eq(vec![Some(reason.to_string())]),
        submissions::spam_reviewed_at.eq(now),
    ))
    .returning(SubmissionRow::as_returning())
    .get_result(conn)
    .await
    .optional()?;
    if let Some(row) = marked {
        return Ok(Some((row, true)));
    }
    Ok(submissions::table
        .find(id)
        .select(SubmissionRow::as_select())
        .first(conn)
        .await
        .optional()?
        .map(|row| (row, false)))
}
