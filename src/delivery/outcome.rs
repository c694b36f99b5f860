//! Classifying a request's result and scheduling the next attempt: which outcomes retry,
//! and the doubling schedule (docs/delivery.md).

use std::time::Duration;

use super::email::MailOutcome;
use crate::model::receiver::RetryPolicy;
pub use crate::model::state::AttemptOutcome as Outcome;

/// What one request produced, as recorded in `delivery_attempts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptResult {
    pub outcome: Outcome,
    /// A webhook's HTTP status, or an email's SMTP reply code.
    pub response_status: Option<u16>,
    /// Names the kind of failure, at most 500 characters; never a response body.
    pub error: Option<String>,
    /// An email attempt's SMTP reply text (one printable line, at most 500 characters),
    /// whenever the server replied.
    pub reply: Option<String>,
    /// How long a receiver that answered 429 or 503 asked to be left alone
    /// (`Retry-After`): the next attempt waits at least this long, up to the schedule's
    /// longest wait.
    pub retry_after: Option<Duration>,
}

pub const MAX_ERROR_LENGTH: usize = 500;

impl AttemptResult {
    pub fn from_status(status: u16) -> AttemptResult {
        // HTTP defines 100–599 (and the history's column holds only those); a peer that
        // answers 600–999, which the parser lets through, did not speak HTTP properly:
        // a broken answer, retried like one.
        if !(100..600).contains(&status) {
            return AttemptResult::failure(
                Outcome::NetworkError,
                format!("the destination answered status {status}, which HTTP does not define"),
            );
        }
        if (200..300).contains(&status) {
            AttemptResult {
                outcome: Outcome::Succeeded,
                response_status: Some(status),
                error: None,
                reply: None,
                retry_after: None,
            }
        } else {
            AttemptResult {
                outcome: Outcome::HttpError,
                response_status: Some(status),
                error: Some(format!("the destination answered HTTP {status}")),
                reply: None,
                retry_after: None,
            }
        }
    }

    pub fn failure(outcome: Outcome, error: impl Into<String>) -> AttemptResult {
        let mut error: String = error.into();
        if error.chars().count() > MAX_ERROR_LENGTH {
            error = error.chars().take(MAX_ERROR_LENGTH).collect();
        }
        AttemptResult {
            outcome,
            response_status: None,
            error: Some(error),
            reply: None,
            retry_after: None,
        }
    }

    /// What an email attempt produced: the mail server's reply decides, as a webhook's
    /// status does (2xx delivered, 4xx retried, 5xx final); no reply is a timeout or a
    /// network error, retried; a message that could not be made is final.
    pub fn from_mail(outcome: MailOutcome) -> AttemptResult {
        match outcome {
            MailOutcome::Accepted { code, text } => AttemptResult {
                outcome: Outcome::Succeeded,
                response_status: Some(code),
                error: None,
                reply: Some(text),
                retry_after: None,
            },
            MailOutcome::Deferred { code, text } | MailOutcome::Rejected { code, text } => {
                AttemptResult {
                    outcome: Outcome::SmtpError,
                    response_status: Some(code),
                    error: Some(format!("the mail server answered {code}")),
                    reply: Some(text),
                    retry_after: None,
                }
            }
            MailOutcome::TimedOut => AttemptResult::failure(
                Outcome::Timeout,
                "the mail server did not finish within FORMS_SMTP_TIMEOUT_SECONDS",
            ),
            MailOutcome::ConnectionFailed { reason } => {
                AttemptResult::failure(Outcome::NetworkError, reason)
            }
            MailOutcome::Unsendable { reason } => {
                AttemptResult::failure(Outcome::Unsendable, reason)
            }
        }
    }

    /// Whether another attempt could help: timeouts, network failures, 5xx, 408, 425
    /// and 429. Other 4xx (409 included) and 3xx are final, as is a refused destination.
    /// For email, an SMTP 4xx (a temporary refusal) is retried and a 5xx is final.
    pub fn is_retryable(&self) -> bool {
        match self.outcome {
            Outcome::Succeeded | Outcome::BlockedDestination | Outcome::Unsendable => false,
            Outcome::Timeout | Outcome::NetworkError => true,
            Outcome::HttpError => self
                .response_status
                .is_some_and(|status| status >= 500 || matches!(status, 408 | 425 | 429)),
            Outcome::SmtpError => self
                .response_status
                .is_some_and(|code| (400..500).contains(&code)),
        }
    }
}

/// The state an owner's attempt moves the delivery to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    Delivered,
    /// Back to `pending`, due after this long.
    RetryAfter(Duration),
    Failed,
}

/// `cycle_attempts` is the count after this attempt; `policy` the destination's own
/// schedule or the server's (`RetryPolicy::wait_after`: doubling from the first wait,
/// capped, no jitter).
pub fn next_step(result: &AttemptResult, cycle_attempts: u32, policy: &RetryPolicy) -> NextStep {
    if result.outcome == Outcome::Succeeded {
        return NextStep::Delivered;
    }
    if !result.is_retryable() || cycle_attempts >= policy.max_attempts {
        return NextStep::Failed;
    }
    let asked = result
        .retry_after
        .map_or(Duration::ZERO, |asked| asked.min(policy.max_wait));
    NextStep::RetryAfter(policy.wait_after(cycle_attempts).max(asked))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_http_does_not_define_are_broken_answers_that_fit_the_history() {
        for status in [600, 799, 999] {
            let result = AttemptResult::from_status(status);
            assert_eq!(result.outcome, Outcome::NetworkError);
            assert_eq!(result.response_status, None);
            assert!(result.is_retryable());
        }
        assert_eq!(AttemptResult::from_status(599).response_status, Some(599));
    }

    fn config() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            first_wait: Duration::from_secs(10),
            max_wait: Duration::from_secs(3600),
        }
    }

    #[test]
    fn classification_table() {
        let config = config();
        for (status, expected) in [
            (200, NextStep::Delivered),
            (201, NextStep::Delivered),
            (204, NextStep::Delivered),
            (299, NextStep::Delivered),
            (301, NextStep::Failed),
            (302, NextStep::Failed),
            (400, NextStep::Failed),
            (401, NextStep::Failed),
            (404, NextStep::Failed),
            (409, NextStep::Failed),
            (410, NextStep::Failed),
            (408, NextStep::RetryAfter(Duration::from_secs(10))),
            (425, NextStep::RetryAfter(Duration::from_secs(10))),
            (429, NextStep::RetryAfter(Duration::from_secs(10))),
            (500, NextStep::RetryAfter(Duration::from_secs(10))),
            (502, NextStep::RetryAfter(Duration::from_secs(10))),
            (503, NextStep::RetryAfter(Duration::from_secs(10))),
        ] {
            let result = AttemptResult::from_status(status);
            assert_eq!(next_step(&result, 1, &config), expected, "{status}");
            let outcome = if (200..300).contains(&status) {
                Outcome::Succeeded
            } else {
                Outcome::HttpError
            };
            assert_eq!(result.outcome, outcome, "{status}");
        }
        for outcome in [Outcome::Timeout, Outcome::NetworkError] {
            let result = AttemptResult::failure(outcome, "x");
            assert_eq!(
                next_step(&result, 1, &config),
                NextStep::RetryAfter(Duration::from_secs(10))
            );
        }
        let blocked = AttemptResult::failure(Outcome::BlockedDestination, "x");
        assert_eq!(next_step(&blocked, 1, &config), NextStep::Failed);
    }

    #[test]
    fn doubling_schedule_capped_and_bounded_by_the_allowance() {
        let mut config = config();
        let retry = AttemptResult::from_status(503);
        let waits: Vec<NextStep> = (1..=5).map(|n| next_step(&retry, n, &config)).collect();
        assert_eq!(
            waits,
            [10, 20, 40, 80]
                .map(|s| NextStep::RetryAfter(Duration::from_secs(s)))
                .into_iter()
                .chain([NextStep::Failed])
                .collect::<Vec<_>>()
        );
        config.first_wait = Duration::from_secs(3);
        config.max_wait = Duration::from_secs(7);
        config.max_attempts = 4;
        let waits: Vec<NextStep> = (1..=4).map(|n| next_step(&retry, n, &config)).collect();
        assert_eq!(
            waits,
            vec![
                NextStep::RetryAfter(Duration::from_secs(3)),
                NextStep::RetryAfter(Duration::from_secs(6)),
                NextStep::RetryAfter(Duration::from_secs(7)),
                NextStep::Failed
            ]
        );
        assert_eq!(
            config.wait_after(200),
            Duration::from_secs(7),
            "no overflow"
        );
    }

    #[test]
    fn a_retry_after_lengthens_the_wait_up_to_the_longest_one() {
        let policy = config();
        let asked = |seconds| AttemptResult {
            retry_after: Some(Duration::from_secs(seconds)),
            ..AttemptResult::from_status(429)
        };
        assert_eq!(
            next_step(&asked(30), 1, &policy),
            NextStep::RetryAfter(Duration::from_secs(30))
        );
        assert_eq!(
            next_step(&asked(2), 1, &policy),
            NextStep::RetryAfter(Duration::from_secs(10)),
            "never sooner than the schedule"
        );
        assert_eq!(
            next_step(&asked(86_400), 1, &policy),
            NextStep::RetryAfter(Duration::from_secs(3600)),
            "never longer than its longest wait"
        );
    }

    #[test]
    fn error_text_is_bounded() {
        let result = AttemptResult::failure(Outcome::NetworkError, "é".repeat(900));
        assert_eq!(result.error.unwrap().chars().count(), 500);
    }
}
