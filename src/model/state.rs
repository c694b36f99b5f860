//! The stored vocabularies: a delivery's state, an attempt's outcome, an event's kind, why
//! an endpoint is paused and what happened to it.
//!
//! Each is a Rust enum mapped to its text column once (`db_vocabulary!`): written from the
//! enum, read into it, and a value no variant spells is a read error naming the column's
//! vocabulary, never a default (a row written by another program, or a newer build, is not
//! silently taken for something it is not). The same enums are the GraphQL enums.

/// Defines a stored vocabulary: the enum, its database spelling, and its mapping.
macro_rules! db_vocabulary {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$variant_meta:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash,
            diesel::expression::AsExpression, diesel::deserialize::FromSqlRow, async_graphql::Enum, serde::Serialize,
        )]
        #[diesel(sql_type = diesel::sql_types::Text)]
        #[serde(rename_all = "snake_case")]
        $(#[$meta])*
        pub enum $name {
            $( $(#[$variant_meta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            #[allow(dead_code)]
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The database's spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            /// The value a database spelling names, if any.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $( $text => Some($name::$variant), )+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        text_column!($name, $what);
    };
}

db_vocabulary! {
    /// Where a destination delivers.
    pub enum DestinationKind ("destination kind") {
        /// A signed JSON request to a URL.
        Webhook => "webhook",
        /// An email to a list of addresses.
        Email => "email",
        /// The operator's fixed confirmation, by email, to the one address a submission
        /// names in a field.
        Autoresponder => "autoresponder",
    }
}

db_vocabulary! {
    /// The body a webhook destination is sent: this service's signed JSON, or a chat
    /// platform's incoming-webhook message (docs/delivery.md, "Chat").
    pub enum WebhookFormat ("webhook format") {
        /// The submission as JSON (`type: "submission.received"`).
        Standard => "standard",
        /// A Slack incoming webhook: Block Kit, values as plain text.
        Slack => "slack",
        /// A Discord webhook: an embed, no mention parsed.
        Discord => "discord",
        /// A Microsoft Teams Workflows webhook: an Adaptive Card.
        Teams => "teams",
        /// A Mattermost incoming webhook: a message attachment.
        Mattermost => "mattermost",
        /// A Google Chat incoming webhook: a card.
        GoogleChat => "google_chat",
    }
}

db_vocabulary! {
    /// An event type a destination may receive.
    pub enum DestinationEvent ("destination event") {
        /// A submission was accepted (`type: "submission.received"` in the webhook body).
        SubmissionReceived => "submission.received",
    }
}

db_vocabulary! {
    /// What a management key may do.
    #[graphql(name = "KeyRole")]
    pub enum KeyRole ("key role") {
        /// Everything: queries, subscriptions, mutations, exports.
        Admin => "admin",
        /// Queries and subscriptions only: what a dashboard needs. A leaked read key can
        /// change nothing and export nothing.
        Read => "read",
    }
}

db_vocabulary! {
    /// Where a delivery is in its life.
    pub enum DeliveryState ("delivery state") {
        /// Owed, waiting for its next attempt time.
        Pending => "pending",
        /// Claimed by a worker, holding a lease.
        Processing => "processing",
        /// A destination answered 2xx. Terminal.
        Delivered => "delivered",
        /// Given up on until an operator replays it. Terminal.
        Failed => "failed",
    }
}

impl DeliveryState {
    /// Delivered or failed: the worker never revisits it.
    pub fn is_terminal(self) -> bool {
        matches!(self, DeliveryState::Delivered | DeliveryState::Failed)
    }
}

db_vocabulary! {
    /// How one request of a delivery ended.
    pub enum AttemptOutcome ("attempt outcome") {
        /// The destination answered 2xx.
        Succeeded => "succeeded",
        /// The destination answered with another status.
        HttpError => "http_error",
        /// No complete answer within the request timeout.
        Timeout => "timeout",
        /// No answer at all: the name did not resolve, the connection failed or broke.
        NetworkError => "network_error",
        /// The destination resolved to an address deliveries may not reach; nothing was sent.
        BlockedDestination => "blocked_destination",
        /// The mail server answered 4xx (retried) or 5xx (final); `smtpReplyCode` and
        /// `smtpReply` say what.
        SmtpError => "smtp_error",
        /// The email could not be made for its recipients (an address no server takes);
        /// nothing was sent. Final.
        Unsendable => "unsendable",
    }
}

db_vocabulary! {
    /// What happened to the delivery.
    #[graphql(name = "DeliveryEventKind")]
    pub enum EventKind ("event kind") {
        /// A submission was accepted with a webhook to deliver to.
        Created => "created",
        /// A worker claimed it (again, if an earlier claim's lease ran out).
        Claimed => "claimed",
        /// The claim holder recorded an attempt; `outcome` says how it went.
        AttemptRecorded => "attempt_recorded",
        /// A worker that had lost its claim recorded the attempt it made anyway.
        LateAttemptRecorded => "late_attempt_recorded",
        /// An operator replayed it: a new cycle starts.
        Replayed => "replayed",
        /// A stopping worker gave back a claim it never started.
        HandedBack => "handed_back",
        /// Its submission was erased before it could be sent.
        FailedWithoutAttempt => "failed_without_attempt",
        /// Its endpoint was deleted while it was still owed, and the operator asked for
        /// what it still owed to be cancelled.
        Cancelled => "cancelled",
    }
}

db_vocabulary! {
    /// Why an endpoint's deliveries are paused.
    pub enum PauseReason ("pause reason") {
        /// The receiver answered `410 Gone`.
        Gone => "gone",
        /// Its deliveries failed one after another past the configured threshold.
        FailureThreshold => "failure_threshold",
        /// An operator paused it.
        Operator => "operator",
    }
}

db_vocabulary! {
    /// What happened to an endpoint.
    pub enum EndpointEventKind ("endpoint event kind") {
        /// Its deliveries were paused; `reason` says why.
        Paused => "paused",
        /// Its deliveries were resumed.
        Resumed => "resumed",
        /// It was deleted (its history kept or erased).
        Deleted => "deleted",
        /// One of its destinations reached the warning threshold of failed deliveries in
        /// a row (`FORMS_ENDPOINT_WARN_AFTER_FAILED_DELIVERIES`): the warning before a pause.
        Failing => "failing",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_round_trips_and_nothing_else_parses() {
        for state in DeliveryState::ALL {
            assert_eq!(DeliveryState::parse(state.as_str()), Some(*state));
        }
        for outcome in AttemptOutcome::ALL {
            assert_eq!(AttemptOutcome::parse(outcome.as_str()), Some(*outcome));
        }
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Some(*kind));
        }
        for unknown in ["", "Pending", "PENDING", "queued", "pending "] {
            assert_eq!(DeliveryState::parse(unknown), None, "{unknown:?}");
        }
        assert_eq!(AttemptOutcome::parse("teapot"), None);
        assert_eq!(EventKind::parse("deleted"), None);
        assert_eq!(DeliveryState::ALL.len(), 4);
        assert_eq!(AttemptOutcome::ALL.len(), 7);
        for kind in DestinationKind::ALL {
            assert_eq!(DestinationKind::parse(kind.as_str()), Some(*kind));
        }
        assert_eq!(DestinationKind::parse("sms"), None);
        assert_eq!(EventKind::ALL.len(), 8);
        for reason in PauseReason::ALL {
            assert_eq!(PauseReason::parse(reason.as_str()), Some(*reason));
        }
        for kind in EndpointEventKind::ALL {
            assert_eq!(EndpointEventKind::parse(kind.as_str()), Some(*kind));
        }
        assert_eq!(PauseReason::parse("paused"), None);
    }

    #[test]
    fn details_spell_values_as_the_database_does() {
        assert_eq!(
            serde_json::to_value(EventKind::LateAttemptRecorded).unwrap(),
            "late_attempt_recorded"
        );
        assert_eq!(
            serde_json::to_value(DeliveryState::Processing).unwrap(),
            "processing"
        );
    }
}

db_vocabulary! {
    /// The captcha service an endpoint's forms carry, whose answer intake verifies.
    pub enum CaptchaProvider ("captcha provider") {
        /// Cloudflare Turnstile: the token in `cf-turnstile-response`.
        Turnstile => "turnstile",
        /// hCaptcha: the token in `h-captcha-response`.
        Hcaptcha => "hcaptcha",
        /// Google reCAPTCHA v2 (a checkbox or invisible challenge): `g-recaptcha-response`.
        RecaptchaV2 => "recaptcha_v2",
        /// Google reCAPTCHA v3 (a score, no challenge): `g-recaptcha-response`.
        RecaptchaV3 => "recaptcha_v3",
    }
}

impl CaptchaProvider {
    /// The form field the provider's widget writes its token into.
    pub fn token_field(self) -> &'static str {
        match self {
            CaptchaProvider::Turnstile => "cf-turnstile-response",
            CaptchaProvider::Hcaptcha => "h-captcha-response",
            CaptchaProvider::RecaptchaV2 | CaptchaProvider::RecaptchaV3 => "g-recaptcha-response",
        }
    }

    /// Fields the widget writes that are the token too and are not the submitter's data:
    /// hCaptcha writes its token into `g-recaptcha-response` as well.
    pub fn widget_fields(self) -> &'static [&'static str] {
        match self {
            CaptchaProvider::Turnstile => &["cf-turnstile-response"],
            CaptchaProvider::Hcaptcha => &["h-captcha-response", "g-recaptcha-response"],
            CaptchaProvider::RecaptchaV2 | CaptchaProvider::RecaptchaV3 => {
                &["g-recaptcha-response"]
            }
        }
    }
}

db_vocabulary! {
    /// What a submission gets when a verifier it needs (its captcha's provider, Akismet)
    /// cannot be reached or answers nonsense, or when the endpoint's spam rules give no
    /// verdict within their time budget (`FORMS_SPAM_SCREENING_BUDGET_SECONDS`): never a
    /// silent accept.
    pub enum WhenUnreachable ("verifier policy") {
        /// `503 verifier_unavailable`, nothing stored: the submitter may send it again.
        Refuse => "refuse",
        /// Stored in the spam folder, with the reason, for an operator to judge.
        Spam => "spam",
    }
}
