//! The `forget` job: rows that decide nothing any more, in batches. The autoresponders'
//! recipients whose quiet time has passed (the next submission from that address would take
//! the row over), the captcha tokens seen more than [`TOKEN_MEMORY`] ago (every provider
//! refuses a token that old itself), and the spent form stamps too old to be accepted
//! anyway; and the audit trail's entries older than `FORMS_AUDIT_RETENTION_DAYS` (0:
//! kept for ever).

use chrono::{DateTime, Utc};

use crate::db::Db;

/// Rows forgotten per statement.
const PRUNE_BATCH: i64 = 10_000;
/// At most this many batches of spent form stamps (and of audit entries) forgotten per
/// pass (a million rows).
const MAX_STAMP_BATCHES: usize = 100;
/// How long a captcha token is remembered as seen: an hour, against the providers' few
/// minutes of validity (Turnstile five, hCaptcha and reCAPTCHA two).
const TOKEN_MEMORY: chrono::Duration = chrono::Duration::hours(1);

pub async fn run(db: Db, now: DateTime<Utc>, audit_retention_days: u32) {
    let db = &db;
    if audit_retention_days > 0 {
        let cutoff = now - chrono::Duration::days(i64::from(audit_retention_days));
        for _ in 0..MAX_STAMP_BATCHES {
            match db
                .run(async |conn| {
                    crate::db::audit::delete_older_than(conn, cutoff, PRUNE_BATCH).await
                })
                .await
            {
                Ok(forgotten) if (forgotten as i64) < PRUNE_BATCH => break,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(error = %error.summary(), "cannot delete the audit entries past their retention");
                    break;
                }
            }
        }
    }
    match db
        .run(async |conn| {
            crate::db::destinations::forget_quiet_recipients(conn, now, PRUNE_BATCH).await
        })
        .await
    {
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(error = %error.summary(), "cannot forget autoresponder recipients past their quiet time")
        }
    }
    if let Some(before) = now.checked_sub_signed(TOKEN_MEMORY) {
        if let Err(error) = db
            .run(async |conn| crate::db::spam::forget_tokens(conn, before, PRUNE_BATCH).await)
            .await
        {
            tracing::warn!(error = %error.summary(), "cannot forget the captcha tokens seen long ago");
        }
    }
    // Each spent stamp's row says when the stamp stops being accepted: past that,
    // remembering it decides nothing. Batch after batch (a busy form spends more than
    // one batch an hour), up to a bound; the next pass goes on.
    for _ in 0..MAX_STAMP_BATCHES {
        match db
            .run(async |conn| {
                crate::db::spam::forget_spent_form_stamps(conn, now, PRUNE_BATCH).await
            })
            .await
        {
            Ok(forgotten) if (forgotten as i64) < PRUNE_BATCH => break,
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(error = %error.summary(), "cannot forget the form stamps too old to be accepted");
                break;
            }
        }
    }
}
