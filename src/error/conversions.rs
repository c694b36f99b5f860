//! How the failures of lower layers become API errors: a database failure is
//! `storage_unavailable` (or, for a row this build cannot read, `internal_error`; for an
//! operation past its allowance of calls, `query_too_complex`), the event feed's are its
//! own.

use super::ApiError;
use crate::db::DbError;
use crate::feed::FeedError;
use crate::model::endpoint::{Setting, SettingError};
use crate::model::search::SearchError;

impl ApiError {
    /// A search or value the rules of `model::search` refuse, sent in `field`.
    pub fn search_refused(field: &str, error: SearchError) -> ApiError {
        ApiError::InvalidInput {
            field: field.into(),
            reason: error.to_string(),
        }
    }
}

impl From<diesel::result::Error> for ApiError {
    fn from(error: diesel::result::Error) -> Self {
        ApiError::from(DbError::Query(error))
    }
}

impl From<DbError> for ApiError {
    fn from(error: DbError) -> Self {
        ApiError::from(std::sync::Arc::new(error))
    }
}

/// A DataLoader's shared failure.
impl From<std::sync::Arc<DbError>> for ApiError {
    fn from(error: std::sync::Arc<DbError>) -> Self {
        if let DbError::CallsExhausted { limit } = *error {
            return ApiError::QueryTooComplex {
                reason: format!(
                    "it needs more than {limit} database calls (FORMS_GRAPHQL_MAX_DATABASE_CALLS)"
                ),
            };
        }
        // A row this build cannot read is no outage: trying again will not help.
        if error.is_unreadable_row() {
            ApiError::Internal(error.summary())
        } else {
            ApiError::StorageUnavailable(error)
        }
    }
}

impl From<FeedError> for ApiError {
    fn from(error: FeedError) -> Self {
        match error {
            FeedError::HistoryExpired {
                after,
                pruned_through,
            } => ApiError::EventHistoryExpired {
                after_event_id: after,
                pruned_through,
            },
            FeedError::Storage(error) => ApiError::from(error),
            FeedError::Closing => ApiError::Internal("the server is shutting down".into()),
        }
    }
}

/// The API's error for a setting that breaks its rule, naming the input field as the
/// client writes it: a field of `input` by its path inside it (`captcha.secret`), the
/// name most inputs give the setting. An input that names it otherwise says so with
/// `graphql/mutation.rs` `refused_as`.
impl From<SettingError> for ApiError {
    fn from(error: SettingError) -> Self {
        match error {
            SettingError::WebhookUrl(reason) => ApiError::InvalidWebhookUrl {
                field: "webhookUrl".into(),
                reason: reason.to_string(),
            },
            SettingError::Template { setting, problem } => ApiError::InvalidInput {
                field: input_field(setting).into(),
                reason: problem,
            },
            SettingError::Invalid { setting, reason } => ApiError::InvalidInput {
                field: input_field(setting).into(),
                reason: reason.into(),
            },
        }
    }
}

/// The input field a setting is sent in, by its path inside the input.
fn input_field(setting: Setting) -> &'static str {
    {
        match setting {
            Setting::Name => "name",
            Setting::RedirectUrl => "redirectUrl",
            Setting::AllowedOrigins => "allowedOrigins",
            Setting::HoneypotField => "honeypotField",
            Setting::Recipients => "recipients",
            Setting::ReplyToField => "replyToField",
            Setting::MaxInFlight => "maxInFlight",
            Setting::MaxRequestsPerSecond => "maxRequestsPerSecond",
            Setting::Events => "events",
            Setting::ReplySubject => "subject",
            Setting::ReplyBody => "body",
            Setting::ReplyWindowSeconds => "windowSeconds",
            Setting::CaptchaSecret => "captcha.secret",
            Setting::CaptchaMinScore => "captcha.minScore",
            Setting::MaxLinks => "maxLinks",
            Setting::BlockedWords => "blockedWords",
            Setting::BlockedPatterns => "blockedPatterns",
            Setting::BlockedSenders => "blockedSenders",
            Setting::MinFillSeconds => "minFillSeconds",
            Setting::Akismet => "akismet",
            Setting::OverlapSeconds => "overlapSeconds",
            Setting::Headers => "headers",
            Setting::HeaderName => "headers.name",
            Setting::HeaderValue => "headers.value",
            Setting::BasicUsername => "auth.basic.username",
            Setting::BasicPassword => "auth.basic.password",
            Setting::BearerToken => "auth.bearer.token",
            Setting::RetryMaxAttempts => "retryPolicy.maxAttempts",
            Setting::RetryFirstWait => "retryPolicy.firstWaitSeconds",
            Setting::RetryMaxWait => "retryPolicy.maxWaitSeconds",
            Setting::BodyTemplate => "bodyTemplate",
            Setting::SubjectTemplate => "emailTemplate.subject",
            Setting::TextTemplate => "emailTemplate.text",
            Setting::OAuth2TokenUrl => "auth.oauth2.tokenUrl",
            Setting::OAuth2ClientId => "auth.oauth2.clientId",
            Setting::OAuth2ClientSecret => "auth.oauth2.clientSecret",
            Setting::OAuth2Scope => "auth.oauth2.scope",
            Setting::OAuth2Audience => "auth.oauth2.audience",
            Setting::ClientCertificate => "clientCertificate.certificate",
            Setting::ClientKey => "clientCertificate.key",
            Setting::ClientCa => "clientCa",
            Setting::RetentionDays => "retentionDays",
            Setting::SpamRetentionDays => "spamRetentionDays",
        }
    }
}
