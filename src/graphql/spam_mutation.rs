//! Spam protection and the spam folder's mutations: an endpoint's captcha, rules and
//! Akismet (`setSpamProtection`, `removeSpamProtection`; spam.rs shows them), and an
//! operator's verdicts on submissions (`markSubmissionNotSpam`, `markSubmissionSpam`).

use async_graphql::{Context, InputObject, Object, SimpleObject, ID};

use super::audit::{audited, Audited};
use super::error::{ResolverError, Result};
use super::ids::{endpoint_or_not_found, submission_or_not_found};
use super::spam::SpamProtection;
use super::types::{Endpoint, Submission};
use super::visibility::sees;
use super::{app, database};
use crate::db;
use crate::db::models::{EndpointRow, SpamProtectionRow, SubmissionRow};
use crate::db::projects::Owned;
use crate::db::spam::Release;
use crate::error::ApiError;
use crate::model::endpoint::{Setting, SettingError};
use crate::model::ids::{EndpointId, SubmissionId};
use crate::model::spam as rules;
use crate::model::state::{CaptchaProvider, WhenUnreachable};

/// The reason an operator's "spam" is recorded with.
const MARKED_BY_OPERATOR: &str = "marked spam by an operator";

/// An endpoint's captcha.
#[derive(InputObject)]
pub struct CaptchaInput {
    pub provider: CaptchaProvider,
    /// The provider's secret key; stored and never shown again. Left out: the secret
    /// stored for the same provider is kept (required when there is none, or the provider
    /// changes).
    pub secret: Option<String>,
    /// reCAPTCHA v3 only, and required there: a score under it (0.0–1.0) is spam.
    pub min_score: Option<f64>,
}

/// An endpoint's whole protection: what is left out is off.
#[derive(InputObject)]
pub struct SetSpamProtectionInput {
    pub endpoint_id: ID,
    /// The captcha its forms carry, verified before anything is stored; left out: none.
    pub captcha: Option<CaptchaInput>,
    /// What a submission gets when its captcha's provider or Akismet cannot be reached,
    /// or when the spam rules give no verdict within their time budget
    /// (`FORMS_SPAM_SCREENING_BUDGET_SECONDS`).
    #[graphql(default_with = "WhenUnreachable::Refuse")]
    pub when_verifier_unreachable: WhenUnreachable,
    /// More links than this, over every value, is spam: each `//` after a scheme (any
    /// scheme: `https://`, `ftp://`) or scheme-relative (`//a.com`), and each `www.` that
    /// follows none, counted once.
    pub max_links: Option<i32>,
    /// Words (whole words, any case; `_` separates words as spaces and punctuation do)
    /// that make a submission spam; at most 200. Words and values are normalised alike
    /// before they are compared (invisible characters dropped, NFKC, accents stripped,
    /// look-alike letters mapped).
    #[graphql(default)]
    pub blocked_words: Vec<String>,
    /// Regular expressions (the regex crate's syntax, any case) that make a submission
    /// spam when one matches a value; at most 50.
    #[graphql(default)]
    pub blocked_patterns: Vec<String>,
    /// Addresses (`someone@example.com`) and domains (`example.com`, its subdomains too):
    /// a value that is such an address makes a submission spam; at most 200.
    #[graphql(default)]
    pub blocked_senders: Vec<String>,
    /// A submission sent sooner than this many seconds (1–3600) after its form was
    /// served, or without a valid form stamp, or with one that expired
    /// (`FORMS_FORM_STAMP_MAX_AGE_SECONDS`) or was spent by an earlier submission (each
    /// stamp vouches for one), is spam.
    pub min_fill_seconds: Option<i32>,
    /// Ask Akismet (`FORMS_AKISMET_API_KEY`) about what no other rule judged spam; the
    /// endpoint's first allowed origin is the site Akismet is told.
    #[graphql(default)]
    pub akismet: bool,
}

#[derive(SimpleObject)]
pub struct SpamProtectionPayload {
    pub endpoint: Endpoint,
    /// As stored; null after `removeSpamProtection`.
    pub spam_protection: Option<SpamProtection>,
}

#[derive(SimpleObject)]
pub struct MarkNotSpamPayload {
    pub submission: Submission,
    /// Deliveries queued by this mutation: one per destination the first time, 0 when
    /// it was not in the spam folder.
    pub queued_deliveries: i32,
}

#[derive(SimpleObject)]
pub struct MarkSpamPayload {
    pub submission: Submission,
}

#[derive(Default)]
pub struct SpamMutation;

fn invalid(setting: Setting, reason: &'static str) -> ResolverError {
    ApiError::from(SettingError::Invalid { setting, reason }).into()
}

/// An endpoint that exists and is not a tombstone, read once: its id and its row (which
/// setting its protection does not change, so the answer shows it as read).
async fn live_endpoint(ctx: &Context<'_>, id: &ID) -> Result<(EndpointId, EndpointRow)> {
    let endpoint_id = endpoint_or_not_found(id)?;
    let row = database(ctx)
        .run(async |conn| db::endpoints::find(conn, &endpoint_id).await)
        .await?;
    match row {
        None => Err(ApiError::EndpointNotFound {
            endpoint_id: id.0.clone(),
        }
        .into()),
        // Another project's endpoint is answered as an unknown one.
        Some(row) if !sees(ctx, &row.project_id) => Err(ApiError::EndpointNotFound {
            endpoint_id: id.0.clone(),
        }
        .into()),
        Some(row) if row.deleted_at.is_some() => Err(ApiError::EndpointDeleted {
            endpoint_id: id.0.clone(),
        }
        .into()),
        Some(row) => Ok((endpoint_id, row)),
    }
}

#[Object]
impl SpamMutation {
    /// Sets an endpoint's whole protection against spam (docs/intake.md, "Spam"); what
    /// the input leaves out is off. Takes effect in every process within moments.
    async fn set_spam_protection(
        &self,
        ctx: &Context<'_>,
        mut input: SetSpamProtectionInput,
    ) -> Result<SpamProtectionPayload> {
        let app = app(ctx);
        let (endpoint_id, endpoint) = live_endpoint(ctx, &input.endpoint_id).await?;
        let current = database(ctx)
            .run(async |conn| db::spam::protection(conn, &endpoint_id).await)
            .await?;
        let (provider, secret, min_score, keep_secret) = match input.captcha {
            None => (None, None, None, false),
            Some(captcha) => {
                let min_score = match (captcha.provider, captcha.min_score) {
                    (CaptchaProvider::RecaptchaV3, Some(score)) => {
                        Some(rules::captcha_min_score(score)?)
                    }
                    (CaptchaProvider::RecaptchaV3, None) => {
                        return Err(invalid(
                            Setting::CaptchaMinScore,
                            "required for reCAPTCHA v3",
                        ))
                    }
                    (_, Some(_)) => {
                        return Err(invalid(
                            Setting::CaptchaMinScore,
                            "only reCAPTCHA v3 answers with a score",
                        ))
                    }
                    (_, None) => None,
                };
                match captcha.secret {
                    Some(secret) => (
                        Some(captcha.provider),
                        Some(rules::captcha_secret(&secret)?),
                        min_score,
                        false,
                    ),
                    None if current.as_ref().and_then(|c| c.captcha_provider)
                        == Some(captcha.provider) =>
                    {
                        (Some(captcha.provider), None, min_score, true)
                    }
                    None => {
                        return Err(invalid(
                            Setting::CaptchaSecret,
                            "required for a new captcha provider",
                        ))
                    }
                }
            }
        };
        if input.akismet {
            if app.config.spam.akismet_key.is_none() {
                return Err(invalid(
                    Setting::Akismet,
                    "this server has no Akismet key (FORMS_AKISMET_API_KEY)",
                ));
            }
            if endpoint.allowed_origins().next().is_none() {
                return Err(invalid(
                    Setting::Akismet,
                    "Akismet is told the form's site: set the endpoint's allowedOrigins first",
                ));
            }
        }
        let stored_list = |list: Vec<String>| list.into_iter().map(Some).collect::<Vec<_>>();
        // Words and patterns are checked by compiling them, which can take tens of
        // milliseconds of CPU: on a blocking thread, not on the request's task.
        let (words, patterns) = (
            std::mem::take(&mut input.blocked_words),
            std::mem::take(&mut input.blocked_patterns),
        );
        let (checked_words, checked_patterns) = tokio::task::spawn_blocking(move || {
            (
                rules::blocked_words(&words),
                rules::blocked_patterns(&patterns),
            )
        })
        .await
        .map_err(|error| ApiError::Internal(format!("cannot check the spam rules: {error}")))?;
        let row = SpamProtectionRow {
            endpoint_id: endpoint_id.clone(),
            captcha_provider: provider,
            captcha_secret: secret,
            captcha_min_score: min_score,
            when_unreachable: input.when_verifier_unreachable,
            max_links: input.max_links.map(rules::max_links).transpose()?,
            blocked_words: stored_list(checked_words?),
            blocked_patterns: stored_list(checked_patterns?),
            blocked_senders: stored_list(rules::blocked_senders(&input.blocked_senders)?),
            min_fill_seconds: input
                .min_fill_seconds
                .map(rules::min_fill_seconds)
                .transpose()?,
            akismet: input.akismet,
            updated_at: app.clock.now(),
        };
        let missing = || ApiError::EndpointNotFound {
            endpoint_id: endpoint_id.to_string(),
        };
        let stored = audited(
            ctx,
            Some(Owned::Endpoint(&endpoint_id)),
            missing,
            async |conn| {
                let stored =
                    db::spam::set_protection(conn, &endpoint_id, Some(row.clone()), keep_secret)
                        .await?;
                Ok(Audited::changed(stored, vec![endpoint_id.to_string()]))
            },
        )
        .await?;
        app.intake.endpoints.invalidate(endpoint_id.as_str());
        Ok(SpamProtectionPayload {
            endpoint: Endpoint::new(endpoint),
            spam_protection: stored.map(SpamProtection),
        })
    }

    /// Removes an endpoint's protection: no captcha, no rules, no Akismet.
    async fn remove_spam_protection(
        &self,
        ctx: &Context<'_>,
        endpoint_id: ID,
    ) -> Result<SpamProtectionPayload> {
        let (endpoint_id, endpoint) = live_endpoint(ctx, &endpoint_id).await?;
        let missing = || ApiError::EndpointNotFound {
            endpoint_id: endpoint_id.to_string(),
        };
        audited(
            ctx,
            Some(Owned::Endpoint(&endpoint_id)),
            missing,
            async |conn| {
                db::spam::set_protection(conn, &endpoint_id, None, false).await?;
                Ok(Audited::changed((), vec![endpoint_id.to_string()]))
            },
        )
        .await?;
        app(ctx).intake.endpoints.invalidate(endpoint_id.as_str());
        Ok(SpamProtectionPayload {
            endpoint: Endpoint::new(endpoint),
            spam_protection: None,
        })
    }

    /// Moves a submission out of the spam folder and queues its deliveries through the
    /// outbox, as if it had just arrived: once (again is a no-op answering 0), in the
    /// same transaction as the verdict. Reported to Akismet as not spam where the
    /// endpoint uses it.
    async fn mark_submission_not_spam(
        &self,
        ctx: &Context<'_>,
        id: ID,
    ) -> Result<MarkNotSpamPayload> {
        let submission_id = submission_or_not_found(&id)?;
        let app = app(ctx);
        let now = app.clock.now();
        let missing = || ApiError::SubmissionNotFound {
            submission_id: id.0.clone(),
        };
        let release = audited(
            ctx,
            Some(Owned::Submission(&submission_id)),
            missing,
            async |conn| {
                let release = db::spam::release(conn, &submission_id, Some(now)).await?;
                Ok(match release {
                    Release::Released { .. } => {
                        Audited::changed(release, vec![submission_id.to_string()])
                    }
                    Release::NotSpam => Audited::unchanged(release),
                })
            },
        )
        .await?;
        let row = submission_row(ctx, &id, &submission_id).await?;
        let queued = match release {
            Release::Released { queued } => {
                report_to_akismet(ctx, &row, false).await;
                queued
            }
            Release::NotSpam => 0,
        };
        Ok(MarkNotSpamPayload {
            submission: Submission(row),
            queued_deliveries: i32::try_from(queued).unwrap_or(i32::MAX),
        })
    }

    /// Moves an accepted submission into the spam folder. What was delivered stays
    /// delivered, and deliveries still owed are not stopped (replays of it are still
    /// possible). Reported to Akismet as spam where the endpoint uses it.
    async fn mark_submission_spam(&self, ctx: &Context<'_>, id: ID) -> Result<MarkSpamPayload> {
        let submission_id = submission_or_not_found(&id)?;
        let now = app(ctx).clock.now();
        let missing = || ApiError::SubmissionNotFound {
            submission_id: id.0.clone(),
        };
        let marked = audited(
            ctx,
            Some(Owned::Submission(&submission_id)),
            missing,
            async |conn| {
                let marked =
                    db::spam::mark_spam(conn, &submission_id, MARKED_BY_OPERATOR, now).await?;
                Ok(match &marked {
                    Some((_, true)) => Audited::changed(marked, vec![submission_id.to_string()]),
                    _ => Audited::unchanged(marked),
                })
            },
        )
        .await?;
        let Some((row, changed)) = marked else {
            return Err(ApiError::SubmissionNotFound {
                submission_id: id.0,
            }
            .into());
        };
        if changed {
            report_to_akismet(ctx, &row, true).await;
        }
        Ok(MarkSpamPayload {
            submission: Submission(row),
        })
    }
}

async fn submission_row(
    ctx: &Context<'_>,
    id: &ID,
    submission_id: &SubmissionId,
) -> Result<SubmissionRow> {
    let ids = [submission_id.clone()];
    database(ctx)
        .run(async |conn| db::submissions::find_many(conn, &ids).await)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::SubmissionNotFound {
            submission_id: id.0.clone(),
        })
        .map_err(ResolverError::from)
}

/// Tells Akismet an operator's verdict when the submission's endpoint uses it. The
/// verdict is stored whatever Akismet answers: a report that fails is logged and counted.
async fn report_to_akismet(ctx: &Context<'_>, submission: &SubmissionRow, spam: bool) {
    let endpoint_id = &submission.endpoint_id;
    let found = database(ctx)
        .run(async |conn| {
            let protection = db::spam::protection(conn, endpoint_id).await?;
            let endpoint = db::endpoints::find(conn, endpoint_id).await?;
            Ok(protection.zip(endpoint))
        })
        .await;
    match found {
        Ok(Some((protection, endpoint))) if protection.akismet => {
            app(ctx)
                .intake
                .screening
                .report(&endpoint, &submission.fields, spam)
                .await;
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(
            error = %error.summary(),
            "cannot read the endpoint to report a verdict to Akismet"
        ),
    }
}
