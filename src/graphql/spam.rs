//! `Endpoint.spamProtection`: an endpoint's captcha, rules and Akismet as they are set
//! (spam_mutation.rs sets them).

use async_graphql::Object;

use super::timestamp::Timestamp;
use crate::db::models::SpamProtectionRow;
use crate::model::state::{CaptchaProvider, WhenUnreachable};

/// An endpoint's protection against spam (its captcha's secret is never shown).
pub struct SpamProtection(pub SpamProtectionRow);

#[Object]
impl SpamProtection {
    async fn captcha_provider(&self) -> Option<CaptchaProvider> {
        self.0.captcha_provider
    }
    async fn captcha_min_score(&self) -> Option<f64> {
        self.0.captcha_min_score.map(f64::from)
    }
    async fn when_verifier_unreachable(&self) -> WhenUnreachable {
        self.0.when_unreachable
    }
    async fn max_links(&self) -> Option<i32> {
        self.0.max_links
    }
    async fn blocked_words(&self) -> Vec<&str> {
        self.0
            .blocked_words
            .iter()
            .flatten()
            .map(String::as_str)
            .collect()
    }
    async fn blocked_patterns(&self) -> Vec<&str> {
        self.0
            .blocked_patterns
            .iter()
            .flatten()
            .map(String::as_str)
            .collect()
    }
    async fn blocked_senders(&self) -> Vec<&str> {
        self.0
            .blocked_senders
            .iter()
            .flatten()
            .map(String::as_str)
            .collect()
    }
    async fn min_fill_seconds(&self) -> Option<i32> {
        self.0.min_fill_seconds
    }
    async fn akismet(&self) -> bool {
        self.0.akismet
    }
    async fn updated_at(&self) -> Timestamp {
        Timestamp(self.0.updated_at)
    }
}
