//! How a webhook receiver is called beyond its URL and signature: the static headers it
//! asks for, how its requests authenticate, and a destination's own retry schedule
//! (docs/delivery.md, "Receivers"). Checked here when an operator sets them; stored as
//! checked; sent by the webhook sender. Secret values are write-only: never answered,
//! logged or recorded.

use diesel::deserialize::FromSqlRow;
use diesel::expression::AsExpression;
use std::time::Duration;

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::endpoint::{Setting, SettingError};

/// A destination sends at most this many headers of its own.
pub const MAX_HEADERS: usize = 20;
const MAX_HEADER_NAME_LENGTH: usize = 64;
const MAX_HEADER_VALUE_LENGTH: usize = 2048;
const MAX_USERNAME_LENGTH: usize = 256;
const MAX_PASSWORD_LENGTH: usize = 1024;
const MAX_TOKEN_LENGTH: usize = 4096;

/// Header names a destination cannot set: the connection's own (hop-by-hop), what the
/// body and the request line decide, what the signatures and traces are sent in.
const FORBIDDEN_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "hymical-signature",
    "traceparent",
    "tracestate",
];

/// One static header a destination's requests carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestHeader {
    pub name: String,
    pub value: String,
    /// Write-only: the value is sent, never answered (shown as set).
    pub secret: bool,
}

/// A destination's headers, in the order they are sent (a JSON array in its row).
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, AsExpression, FromSqlRow,
)]
#[diesel(sql_type = diesel::sql_types::Jsonb)]
#[serde(transparent)]
pub struct RequestHeaders(pub Vec<RequestHeader>);
json_column!(RequestHeaders, "a destination's headers");

/// A header as an operator sets it. `value: None` keeps the value stored for a secret
/// header of the same name (a client cannot read it back to send it again).
#[derive(Debug, Clone)]
pub struct HeaderSetting {
    pub name: String,
    pub value: Option<String>,
    pub secret: bool,
}

fn invalid(setting: Setting, reason: &'static str) -> SettingError {
    SettingError::Invalid { setting, reason }
}

/// RFC 9110 `tchar`: what a header name is made of.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// A value sent as written: printable ASCII and tabs (never CR, LF or NUL, which could end
/// the header and start another).
fn is_plain_value(value: &str) -> bool {
    value.chars().all(|c| c == '\t' || (' '..='~').contains(&c))
}

/// The headers to store for `wanted`, given the destination's `current` ones: at most 20,
/// names of 1–64 token characters, none twice (letter case aside), none the request's own
/// (hop-by-hop, `Host`, `Content-*`, the signatures' and traces'), values of at most 2048
/// printable ASCII characters, trimmed.
pub fn request_headers(
    wanted: Vec<HeaderSetting>,
    current: &RequestHeaders,
) -> Result<RequestHeaders, SettingError> {
    if wanted.len() > MAX_HEADERS {
        return Err(invalid(
            Setting::Headers,
            "a destination sends at most 20 headers",
        ));
    }
    let mut headers: Vec<RequestHeader> = Vec::with_capacity(wanted.len());
    for setting in wanted {
        let name = setting.name.trim().to_string();
        if name.is_empty() || name.len() > MAX_HEADER_NAME_LENGTH || !name.chars().all(is_tchar) {
            return Err(invalid(
                Setting::HeaderName,
                "a header name must be 1 to 64 letters, digits or !#$%&'*+-.^_`|~",
            ));
        }
        let lower = name.to_ascii_lowercase();
        if FORBIDDEN_HEADERS.contains(&lower.as_str()) || lower.starts_with("webhook-") {
            return Err(invalid(
                Setting::HeaderName,
                "a header cannot be hop-by-hop, Host, Content-Type, Content-Length, Content-Encoding, a signature (Hymical-Signature, webhook-*) or a trace header (traceparent, tracestate)",
            ));
        }
        if headers.iter().any(|h| h.name.eq_ignore_ascii_case(&name)) {
            return Err(invalid(Setting::HeaderName, "a header name appears twice"));
        }
        let value = match setting.value {
            Some(value) => value.trim().to_string(),
            None => current
                .0
                .iter()
                .find(|h| h.secret && setting.secret && h.name.eq_ignore_ascii_case(&name))
                .map(|h| h.value.clone())
                .ok_or(invalid(
                    Setting::HeaderValue,
                    "a header needs a value (only a secret header already set may leave it out, to keep it)",
                ))?,
        };
        if value.len() > MAX_HEADER_VALUE_LENGTH || !is_plain_value(&value) {
            return Err(invalid(
                Setting::HeaderValue,
                "a header value must be at most 2048 printable ASCII characters (no line breaks or control characters)",
            ));
        }
        headers.push(RequestHeader {
            name,
            value,
            secret: setting.secret,
        });
    }
    Ok(RequestHeaders(headers))
}

/// How a destination's requests authenticate to the receiver (`Authorization`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, AsExpression, FromSqlRow)]
#[diesel(sql_type = diesel::sql_types::Jsonb)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RequestAuth {
    /// HTTP Basic (RFC 7617): the password is write-only.
    Basic { username: String, password: String },
    /// A bearer token (RFC 6750), write-only.
    Bearer { token: String },
    /// OAuth2 client credentials (RFC 6749 4.4): a bearer token fetched from `token_url`
    /// by the sending process, cached in its memory until shortly before it expires, and
    /// never stored. The client secret is write-only.
    #[serde(rename = "oauth2")]
    OAuth2 {
        token_url: String,
        client_id: String,
        client_secret: String,
        scope: Option<String>,
        audience: Option<String>,
    },
}
json_column!(RequestAuth, "a destination's authentication");

impl RequestAuth {
    /// Basic: a username of 1–256 printable characters without `:` and a password of
    /// 1–1024 without control characters (UTF-8, as RFC 7617 suggests).
    pub fn basic(username: &str, password: &str) -> Result<RequestAuth, SettingError> {
        let printable = |s: &str| !s.chars().any(char::is_control);
        if username.is_empty()
            || username.chars().count() > MAX_USERNAME_LENGTH
            || username.contains(':')
            || !printable(username)
        {
            return Err(invalid(
                Setting::BasicUsername,
                "a Basic username must be 1 to 256 characters without ':' or control characters",
            ));
        }
        if password.is_empty()
            || password.chars().count() > MAX_PASSWORD_LENGTH
            || !printable(password)
        {
            return Err(invalid(
                Setting::BasicPassword,
                "a Basic password must be 1 to 1024 characters without control characters",
            ));
        }
        Ok(RequestAuth::Basic {
            username: username.to_string(),
            password: password.to_string(),
        })
    }

    /// Bearer: a token of 1–4096 visible ASCII characters (no spaces).
    pub fn bearer(token: &str) -> Result<RequestAuth, SettingError> {
        if token.is_empty()
            || token.len() > MAX_TOKEN_LENGTH
            || !token.chars().all(|c| c.is_ascii_graphic())
        {
            return Err(invalid(
                Setting::BearerToken,
                "a bearer token must be 1 to 4096 visible ASCII characters without spaces",
            ));
        }
        Ok(RequestAuth::Bearer {
            token: token.to_string(),
        })
    }

    /// OAuth2 client credentials: a token URL under the webhook URL's rules (`allow_private`
    /// as for webhooks), a client id of 1–256 and a secret of 1–1024 characters without
    /// control characters, a scope of 1–1024 RFC 6749 scope characters (space-separated
    /// tokens) and an audience of 1–2048 printable characters, each optional.
    pub fn oauth2(
        token_url: &str,
        client_id: &str,
        client_secret: &str,
        scope: Option<&str>,
        audience: Option<&str>,
        allow_private: bool,
    ) -> Result<RequestAuth, SettingError> {
        use super::destination::{validate_webhook_url, DestinationError};
        let token_url = validate_webhook_url(token_url, allow_private)
            .map(|_| token_url.trim().to_string())
            .map_err(|error| {
                invalid(
                    Setting::OAuth2TokenUrl,
                    match error {
                        DestinationError::TooLong => "the token URL is longer than 2048 characters",
                        DestinationError::Unparsable => "the token URL cannot be parsed",
                        DestinationError::Scheme => "the token URL must use http or https",
                        DestinationError::NoHost => "the token URL has no host",
                        DestinationError::InternalAddress => "the token URL names a loopback, private, link-local or otherwise internal address",
                    },
                )
            })?;
        let printable = |s: &str, max: usize| {
            !s.is_empty() && s.chars().count() <= max && !s.chars().any(char::is_control)
        };
        if !printable(client_id, MAX_USERNAME_LENGTH) {
            return Err(invalid(
                Setting::OAuth2ClientId,
                "a client id must be 1 to 256 characters without control characters",
            ));
        }
        if !printable(client_secret, MAX_PASSWORD_LENGTH) {
            return Err(invalid(
                Setting::OAuth2ClientSecret,
                "a client secret must be 1 to 1024 characters without control characters",
            ));
        }
        // RFC 6749 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ), joined by spaces.
        let scope_char = |c: char| c == ' ' || (c.is_ascii_graphic() && c != '"' && c != '\\');
        if let Some(scope) = scope {
            if scope.trim().is_empty()
                || scope.len() > MAX_PASSWORD_LENGTH
                || !scope.chars().all(scope_char)
            {
                return Err(invalid(
                    Setting::OAuth2Scope,
                    "a scope must be 1 to 1024 visible ASCII characters (no \" or \\), tokens separated by spaces",
                ));
            }
        }
        if let Some(audience) = audience {
            if !printable(audience, MAX_HEADER_VALUE_LENGTH) {
                return Err(invalid(
                    Setting::OAuth2Audience,
                    "an audience must be 1 to 2048 characters without control characters",
                ));
            }
        }
        Ok(RequestAuth::OAuth2 {
            token_url,
            client_id: client_id.to_string(),
            client_secret: client_secret.to_string(),
            scope: scope.map(|s| s.trim().to_string()),
            audience: audience.map(str::to_string),
        })
    }

    /// The `Authorization` header's value, for an authentication that has a fixed one;
    /// `None` for OAuth2, whose token the sender fetches (delivery/oauth.rs).
    pub fn authorization(&self) -> Option<String> {
        match self {
            RequestAuth::Basic { username, password } => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
            )),
            RequestAuth::Bearer { token } => Some(format!("Bearer {token}")),
            RequestAuth::OAuth2 { .. } => None,
        }
    }
}

/// A destination's URL, headers and authentication together: one `Authorization` at most.
/// A header of its own named `Authorization` is allowed only without an authentication,
/// and neither with a URL that carries a user and password (which the client sends as
/// Basic).
pub fn headers_beside_auth(
    url: Option<&str>,
    headers: &RequestHeaders,
    auth: Option<&RequestAuth>,
) -> Result<(), SettingError> {
    let url_credentials = url
        .and_then(|raw| url::Url::parse(raw).ok())
        .is_some_and(|url| !url.username().is_empty() || url.password().is_some());
    let named_authorization = headers
        .0
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("authorization"));
    if named_authorization && auth.is_some() {
        return Err(invalid(
            Setting::HeaderName,
            "an Authorization header and an authentication cannot both be set",
        ));
    }
    if url_credentials && (named_authorization || auth.is_some()) {
        return Err(invalid(
            Setting::HeaderName,
            "the URL carries a user and password already: its Basic authentication is sent",
        ));
    }
    Ok(())
}

/// The prefixes of an Ed25519 signing key and of its public key (Standard Webhooks).
const ED25519_SECRET_PREFIX: &str = "whsk_";
const ED25519_PUBLIC_PREFIX: &str = "whpk_";

/// A new Ed25519 signing key: `whsk_` and the base64 of a random 32-byte seed (RFC 8032's
/// private key).
pub fn new_ed25519_key() -> String {
    use rand::RngCore;
    let mut seed = [0u8; 32];
    rand::rng().fill_bytes(&mut seed);
    format!(
        "{ED25519_SECRET_PREFIX}{}",
        base64::engine::general_purpose::STANDARD.encode(seed)
    )
}

/// The signing key a stored `whsk_` key holds; `None` for any other string (the stored
/// format is held by a CHECK).
pub fn ed25519_signing_key(stored: &str) -> Option<ed25519_dalek::SigningKey> {
    let seed = base64::engine::general_purpose::STANDARD
        .decode(stored.strip_prefix(ED25519_SECRET_PREFIX)?)
        .ok()?;
    let seed: [u8; 32] = seed.try_into().ok()?;
    Some(ed25519_dalek::SigningKey::from_bytes(&seed))
}

/// The public key a receiver verifies `v1a` signatures with: `whpk_` and the base64 of its
/// 32 bytes.
pub fn ed25519_public_key(stored: &str) -> Option<String> {
    let key = ed25519_signing_key(stored)?;
    Some(format!(
        "{ED25519_PUBLIC_PREFIX}{}",
        base64::engine::general_purpose::STANDARD.encode(key.verifying_key().as_bytes())
    ))
}

/// Retries: at most this many attempts a cycle (as `FORMS_WEBHOOK_MAX_ATTEMPTS`).
const MAX_RETRY_ATTEMPTS: i32 = 1000;
/// The first wait is at most a day; the longest at most a week (in milliseconds, as
/// stored).
const MAX_FIRST_WAIT_MS: i64 = 86_400_000;
const MAX_WAIT_MS: i64 = 7 * 86_400_000;

/// When a failed attempt is tried again: `max_attempts` a cycle, waiting
/// `min(first_wait × 2^(n−1), max_wait)` after the n-th, no jitter. The server's
/// (`FORMS_WEBHOOK_*`) unless a destination has its own (a JSON document in its row,
/// waits in milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, AsExpression, FromSqlRow)]
#[diesel(sql_type = diesel::sql_types::Jsonb)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    #[serde(rename = "first_wait_ms", with = "milliseconds")]
    pub first_wait: Duration,
    #[serde(rename = "max_wait_ms", with = "milliseconds")]
    pub max_wait: Duration,
}
json_column!(RetryPolicy, "a destination's retry policy");

/// A duration stored as whole milliseconds.
mod milliseconds {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(wait: &Duration, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_u64(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(from: D) -> Result<Duration, D::Error> {
        <u64 as serde::Deserialize>::deserialize(from).map(Duration::from_millis)
    }
}

impl RetryPolicy {
    /// A destination's own policy as an operator sets it: 1–1000 attempts, a first wait
    /// of 1 ms to a day, a longest wait from the first wait to a week (whole
    /// milliseconds).
    pub fn checked(
        max_attempts: i32,
        first_wait_seconds: f64,
        max_wait_seconds: f64,
    ) -> Result<RetryPolicy, SettingError> {
        if !(1..=MAX_RETRY_ATTEMPTS).contains(&max_attempts) {
            return Err(invalid(
                Setting::RetryMaxAttempts,
                "maxAttempts must be from 1 to 1000",
            ));
        }
        let ms = |seconds: f64| (seconds * 1000.0).round();
        let (first, max) = (ms(first_wait_seconds), ms(max_wait_seconds));
        if !first.is_finite() || !(1.0..=MAX_FIRST_WAIT_MS as f64).contains(&first) {
            return Err(invalid(
                Setting::RetryFirstWait,
                "firstWaitSeconds must be from 0.001 to 86400",
            ));
        }
        if !max.is_finite() || max < first || max > MAX_WAIT_MS as f64 {
            return Err(invalid(
                Setting::RetryMaxWait,
                "maxWaitSeconds must be from firstWaitSeconds to 604800",
            ));
        }
        Ok(RetryPolicy {
            max_attempts: max_attempts as u32,
            first_wait: Duration::from_millis(first as u64),
            max_wait: Duration::from_millis(max as u64),
        })
    }

    /// The wait after a cycle's `cycle_attempts`-th failed attempt.
    pub fn wait_after(&self, cycle_attempts: u32) -> Duration {
        let exponent = cycle_attempts.saturating_sub(1).min(62);
        let wait = self.first_wait.as_secs_f64() * 2f64.powi(exponent as i32);
        Duration::from_secs_f64(wait.min(self.max_wait.as_secs_f64()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, value: &str) -> HeaderSetting {
        HeaderSetting {
            name: name.into(),
            value: Some(value.into()),
            secret: false,
        }
    }

    #[test]
    fn headers_are_tokens_with_plain_values_and_not_the_requests_own() {
        let checked = request_headers(
            vec![set(" X-Api-Key ", " abc\tdef "), set("X-Tenant", "42")],
            &RequestHeaders::default(),
        )
        .expect("valid");
        assert_eq!(checked.0[0].name, "X-Api-Key");
        assert_eq!(checked.0[0].value, "abc\tdef");
        for (name, value) in [
            ("Host", "example.org"),
            ("content-type", "text/plain"),
            ("Content-Length", "1"),
            ("Transfer-Encoding", "chunked"),
            ("Connection", "close"),
            ("webhook-signature", "v1,x"),
            ("Webhook-Id", "x"),
            ("Hymical-Signature", "x"),
            ("traceparent", "x"),
            ("X Space", "x"),
            ("X:Colon", "x"),
            ("", "x"),
            ("X-Long", &"a".repeat(2049)),
            ("X-Break", "a\r\nInjected: yes"),
            ("X-Lf", "a\nb"),
            ("X-Nul", "a\0b"),
            ("X-Utf8", "é"),
        ] {
            assert!(
                request_headers(vec![set(name, value)], &RequestHeaders::default()).is_err(),
                "{name:?}: {value:?}"
            );
        }
        let twice = vec![set("X-A", "1"), set("x-a", "2")];
        assert!(request_headers(twice, &RequestHeaders::default()).is_err());
        let many = (0..21).map(|i| set(&format!("X-{i}"), "v")).collect();
        assert!(request_headers(many, &RequestHeaders::default()).is_err());
    }

    #[test]
    fn a_secret_header_left_without_a_value_keeps_the_stored_one() {
        let current = RequestHeaders(vec![RequestHeader {
            name: "X-Api-Key".into(),
            value: "stored-secret".into(),
            secret: true,
        }]);
        let keep = HeaderSetting {
            name: "x-api-key".into(),
            value: None,
            secret: true,
        };
        let kept = request_headers(vec![keep.clone()], &current).expect("kept");
        assert_eq!(kept.0[0].value, "stored-secret");
        // Not secret, or no stored secret of that name: a value is needed.
        let open = HeaderSetting {
            secret: false,
            ..keep.clone()
        };
        assert!(request_headers(vec![open], &current).is_err());
        assert!(request_headers(vec![keep], &RequestHeaders::default()).is_err());
    }

    #[test]
    fn authentication_values() {
        let basic = RequestAuth::basic("Aladdin", "open sesame").expect("valid");
        assert_eq!(
            basic.authorization().as_deref(),
            Some("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
        );
        assert_eq!(
            RequestAuth::bearer("abc.def-ghi")
                .expect("valid")
                .authorization()
                .as_deref(),
            Some("Bearer abc.def-ghi")
        );
        assert!(RequestAuth::basic("a:b", "x").is_err());
        assert!(RequestAuth::basic("", "x").is_err());
        assert!(RequestAuth::basic("a", "").is_err());
        assert!(RequestAuth::basic("a", "x\r\ny").is_err());
        assert!(RequestAuth::bearer("has space").is_err());
        assert!(RequestAuth::bearer("line\nbreak").is_err());
        assert!(RequestAuth::bearer(&"t".repeat(4097)).is_err());
        let own = RequestHeaders(vec![RequestHeader {
            name: "Authorization".into(),
            value: "Token x".into(),
            secret: true,
        }]);
        assert!(headers_beside_auth(None, &own, None).is_ok());
        assert!(headers_beside_auth(None, &own, Some(&basic)).is_err());
        let userinfo = Some("https://user:pw@receiver.example/hook");
        assert!(headers_beside_auth(userinfo, &RequestHeaders::default(), Some(&basic)).is_err());
        assert!(headers_beside_auth(userinfo, &own, None).is_err());
        assert!(headers_beside_auth(userinfo, &RequestHeaders::default(), None).is_ok());
    }

    #[test]
    fn oauth2_settings() {
        let ok =
            |url: &str, id: &str, secret: &str, scope: Option<&str>, audience: Option<&str>| {
                RequestAuth::oauth2(url, id, secret, scope, audience, false)
            };
        let auth = ok(
            " https://auth.example.com/token ",
            "client:1",
            "s3cret",
            Some("read write"),
            Some("https://api.example.com"),
        )
        .expect("valid");
        assert!(auth.authorization().is_none());
        let json = serde_json::to_value(&auth).expect("json");
        assert_eq!(json["kind"], "oauth2");
        assert_eq!(json["token_url"], "https://auth.example.com/token");
        assert_eq!(
            serde_json::from_value::<RequestAuth>(json).expect("back"),
            auth
        );
        let setting = |result: Result<RequestAuth, SettingError>| match result {
            Err(SettingError::Invalid { setting, .. }) => Some(setting),
            _ => None,
        };
        const U: &str = "https://auth.example.com/";
        for (refused, result) in [
            (
                Setting::OAuth2TokenUrl,
                ok("http://127.0.0.1/token", "a", "b", None, None),
            ),
            (
                Setting::OAuth2TokenUrl,
                ok("ftp://auth.example.com/", "a", "b", None, None),
            ),
            (Setting::OAuth2ClientId, ok(U, "a\r\nb", "b", None, None)),
            (Setting::OAuth2ClientId, ok(U, "", "b", None, None)),
            (Setting::OAuth2ClientSecret, ok(U, "a", "", None, None)),
            (Setting::OAuth2ClientSecret, ok(U, "a", "b\n", None, None)),
            (Setting::OAuth2Scope, ok(U, "a", "b", Some("a\"b"), None)),
            (Setting::OAuth2Scope, ok(U, "a", "b", Some(" "), None)),
            (Setting::OAuth2Audience, ok(U, "a", "b", None, Some("x\ny"))),
        ] {
            assert_eq!(setting(result), Some(refused));
        }
        assert!(RequestAuth::oauth2("http://127.0.0.1/token", "a", "b", None, None, true).is_ok());
    }

    #[test]
    fn stored_shapes_round_trip() {
        let auth = RequestAuth::bearer("t0ken").expect("valid");
        let json = serde_json::to_value(&auth).expect("json");
        assert_eq!(
            json,
            serde_json::json!({ "kind": "bearer", "token": "t0ken" })
        );
        assert_eq!(
            serde_json::from_value::<RequestAuth>(json).expect("back"),
            auth
        );
        let unknown = serde_json::json!({ "kind": "digest", "token": "x" });
        assert!(serde_json::from_value::<RequestAuth>(unknown).is_err());
    }

    #[test]
    fn ed25519_keys_round_trip_and_differ() {
        let key = new_ed25519_key();
        assert!(key.starts_with("whsk_") && key.len() == 49, "{key}");
        assert_ne!(key, new_ed25519_key());
        let public = ed25519_public_key(&key).expect("public key");
        assert!(
            public.starts_with("whpk_") && public.len() == 49,
            "{public}"
        );
        assert!(ed25519_signing_key("whsec_abc").is_none());
        assert!(ed25519_signing_key("whsk_c2hvcnQ=").is_none());
    }

    #[test]
    fn retry_policy_bounds_and_schedule() {
        let policy = RetryPolicy::checked(4, 0.5, 1.5).expect("valid");
        let waits: Vec<Duration> = (1..=3).map(|n| policy.wait_after(n)).collect();
        assert_eq!(waits, [500, 1000, 1500].map(Duration::from_millis).to_vec());
        assert_eq!(policy.wait_after(200), Duration::from_millis(1500));
        let stored = serde_json::to_value(policy).expect("json");
        assert_eq!(
            stored,
            serde_json::json!({ "max_attempts": 4, "first_wait_ms": 500, "max_wait_ms": 1500 })
        );
        assert_eq!(
            serde_json::from_value::<RetryPolicy>(stored).expect("back"),
            policy
        );
        for (attempts, first, max) in [
            (0, 1.0, 1.0),
            (1001, 1.0, 1.0),
            (3, 0.0, 1.0),
            (3, 0.0004, 1.0),
            (3, 86_401.0, 90_000.0),
            (3, 10.0, 5.0),
            (3, 1.0, 604_801.0),
            (3, f64::NAN, 1.0),
            (3, 1.0, f64::INFINITY),
        ] {
            assert!(
                RetryPolicy::checked(attempts, first, max).is_err(),
                "{attempts} {first} {max}"
            );
        }
    }
}
