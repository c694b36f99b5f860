//! Email destinations: one message over SMTP (`Mailer::send`, lettre on tokio and rustls)
//! and the notification built from a stored submission (`notification`, a pure
//! function).
//!
//! What a message may carry from the submitter is fenced: field names and values only
//! ever appear in the body (HTML-escaped in the HTML part), never in a header, except a
//! Reply-To that is exactly one plain address. The Subject holds the endpoint's name
//! alone. Nothing here logs: the outcome is returned, and the server's reply in it is
//! bounded and printable, because it is stored with the attempt and shown to the operator.

// The delivery worker sends email once destinations land; until then only the tests
// (through the `testing` feature) reach this module.

use std::error::Error as _;
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use lettre::address::Address;
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
use lettre::transport::smtp::response::Response;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::Value;

use crate::config::{SmtpConfig, SmtpTls};
use crate::model::destination::plain_address;

/// The most characters of a server's reply (or of a failure's reason) kept in an outcome.
pub const MAX_REPLY_CHARS: usize = 500;

/// Sends messages through the configured mail server, one connection per message.
#[derive(Clone)]
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    /// Bounds connecting and the whole conversation of one message together.
    timeout: Duration,
}

impl std::fmt::Debug for Mailer {
    // lettre's transport would print its settings, the login among them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailer")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The configuration could not be turned into a transport (never a network failure:
/// `Mailer::new` does not connect).
#[derive(Debug, thiserror::Error)]
pub enum MailerError {
    #[error("the certificate authorities of FORMS_SMTP_CA_FILE cannot be used: {0}")]
    CaCertificates(String),
    #[error("the TLS settings for FORMS_SMTP_HOST cannot be built: {0}")]
    Tls(String),
}

/// One message to send, as `notification` builds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingEmail {
    /// Recipients, each one address (a display name is allowed: `Ops <ops@example.com>`).
    pub to: Vec<String>,
    pub subject: String,
    pub text: String,
    pub html: String,
    /// One address, or none.
    pub reply_to: Option<String>,
    /// `<id@domain>`, the same on every attempt of one delivery.
    pub message_id: String,
}

/// What became of one `Mailer::send`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MailOutcome {
    /// The server answered 2xx at the end of DATA: it took responsibility for the message.
    Accepted { code: u16, text: String },
    /// A 5xx reply, at any step (a refused recipient, a failed AUTH, the message itself):
    /// final.
    Rejected { code: u16, text: String },
    /// A 4xx reply, at any step: retried on the schedule.
    Deferred { code: u16, text: String },
    /// No complete answer within `FORMS_SMTP_TIMEOUT_SECONDS`. The server may have taken
    /// the message if the deadline passed after the end of DATA; a retry then carries the
    /// same Message-ID.
    TimedOut,
    /// DNS, TCP, TLS (a handshake, a certificate, STARTTLS not offered), a closed
    /// connection, a reply that is not SMTP, something the server lacks (an AUTH mechanism
    /// we speak, SMTPUTF8 for a non-ASCII address): retried.
    ConnectionFailed { reason: String },
    /// Never sent, because the message itself cannot be made (a recipient, Reply-To or
    /// Message-ID that is not what `OutgoingEmail` says, or no recipient): no retry can
    /// change that, so it is final, like `Rejected`, but no server said so.
    Unsendable { reason: String },
}

impl Mailer {
    /// Builds the transport; no network here, so a server that is down cannot stop a
    /// process from starting.
    pub fn new(config: &SmtpConfig) -> Result<Mailer, MailerError> {
        let tls = match config.tls {
            SmtpTls::StartTls => Tls::Required(tls_parameters(config)?),
            SmtpTls::Implicit => Tls::Wrapper(tls_parameters(config)?),
            SmtpTls::None => Tls::None,
        };
        // `builder_dangerous` only means "choose TLS yourself": it is chosen above, and
        // `Tls::Required` never falls back to plaintext.
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&config.host)
            .port(config.port)
            .tls(tls)
            // lettre's own timeout bounds the TCP connect; `send` bounds the rest.
            .timeout(Some(config.timeout));
        if let Some(credentials) = &config.credentials {
            builder = builder
                .credentials(Credentials::new(
                    credentials.username.clone(),
                    credentials.password.expose().to_string(),
                ))
                .authentication(vec![Mechanism::Plain, Mechanism::Login]);
        }
        Ok(Mailer {
            transport: builder.build(),
            from: config.from.clone(),
            timeout: config.timeout,
        })
    }

    /// The domain of the sender's address: what `Notification::message_domain` should be.
    pub fn message_domain(&self) -> &str {
        self.from.email.domain()
    }

    /// One SMTP transaction on a connection of its own (connect, EHLO, STARTTLS, AUTH,
    /// MAIL, RCPT for each recipient, DATA), all within the configured timeout. Every
    /// recipient is accepted or the message goes to none: the first refused one ends the
    /// transaction before DATA, so a retry never sends twice to the others.
    pub async fn send(&self, email: &OutgoingEmail) -> MailOutcome {
        let message = match self.message(email) {
            Ok(message) => message,
            Err(reason) => return MailOutcome::Unsendable { reason },
        };
        match tokio::time::timeout(self.timeout, self.transport.send(message)).await {
            Err(_elapsed) => MailOutcome::TimedOut,
            Ok(Ok(response)) => accepted(&response),
            Ok(Err(error)) => failed(&error),
        }
    }

    /// The message as it goes on the wire; the `Date` is this attempt's, as RFC 5322
    /// means it (when the message was handed to the mail system).
    fn message(&self, email: &OutgoingEmail) -> Result<Message, String> {
        if email.to.is_empty() {
            return Err("no recipient".to_string());
        }
        if !is_message_id(&email.message_id) {
            return Err("the Message-ID is not of the form <id@domain>".to_string());
        }
        let mut builder = Message::builder()
            .from(self.from.clone())
            .subject(single_line(&email.subject))
            .message_id(Some(email.message_id.clone()))
            .date_now();
        for (index, to) in email.to.iter().enumerate() {
            // The address itself is not repeated: it is stored with the attempt.
            let mailbox = mailbox(to)
                .ok_or_else(|| format!("recipient {} is not one email address", index + 1))?;
            builder = builder.to(mailbox);
        }
        if let Some(reply_to) = &email.reply_to {
            let mailbox =
                mailbox(reply_to).ok_or_else(|| "Reply-To is not one email address".to_string())?;
            builder = builder.reply_to(mailbox);
        }
        builder
            .multipart(MultiPart::alternative_plain_html(
                email.text.clone(),
                email.html.clone(),
            ))
            .map_err(|error| format!("the message cannot be built: {error}"))
    }
}

fn tls_parameters(config: &SmtpConfig) -> Result<TlsParameters, MailerError> {
    let mut builder = TlsParameters::builder(config.host.clone());
    match &config.ca_certificates {
        // Named rather than lettre's `Default`, which would change meaning with another
        // lettre feature (the platform verifier).
        None => builder = builder.certificate_store(CertificateStore::WebpkiRoots),
        Some(ca) => {
            builder = builder.certificate_store(CertificateStore::None);
            for certificate in &ca.certificates {
                let certificate = Certificate::from_der(certificate.to_vec())
                    .map_err(|error| MailerError::CaCertificates(error.to_string()))?;
                builder = builder.add_root_certificate(certificate);
            }
        }
    }
    builder
        .build_rustls()
        .map_err(|error| MailerError::Tls(error.to_string()))
}

/// A recipient as `OutgoingEmail` allows it: one mailbox, no control characters (lettre
/// would encode them, but no address has any).
fn mailbox(raw: &str) -> Option<Mailbox> {
    if raw.chars().any(char::is_control) {
        return None;
    }
    raw.trim().parse::<Mailbox>().ok()
}

/// `<left@right>` in printable ASCII without spaces: written into the header as it is.
fn is_message_id(id: &str) -> bool {
    let Some(inner) = id.strip_prefix('<').and_then(|id| id.strip_suffix('>')) else {
        return false;
    };
    let Some((left, right)) = inner.split_once('@') else {
        return false;
    };
    !left.is_empty()
        && !right.is_empty()
        && inner
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'<' | b'>'))
}

fn accepted(response: &Response) -> MailOutcome {
    let code = u16::from(response.code());
    let text = reply_text(&response.message().collect::<Vec<_>>().join(" "));
    if (200..300).contains(&code) {
        MailOutcome::Accepted { code, text }
    } else {
        // lettre returns any positive reply; a 3xx at the end of DATA is not an acceptance.
        MailOutcome::ConnectionFailed {
            reason: reply_text(&format!(
                "unexpected reply {code} at the end of DATA: {text}"
            )),
        }
    }
}

fn failed(error: &lettre::transport::smtp::Error) -> MailOutcome {
    if let Some(code) = error.status() {
        let code = u16::from(code);
        // lettre keeps the reply's lines, joined, as the error's source.
        let text = reply_text(&error.source().map(ToString::to_string).unwrap_or_default());
        if error.is_permanent() {
            return MailOutcome::Rejected { code, text };
        }
        return MailOutcome::Deferred { code, text };
    }
    if error.is_timeout() {
        return MailOutcome::TimedOut;
    }
    MailOutcome::ConnectionFailed {
        reason: reply_text(&error.to_string()),
    }
}

/// A server's words made fit to store and show: line breaks and other control
/// characters become spaces, runs of spaces one, at most `MAX_REPLY_CHARS` characters.
pub fn reply_text(raw: &str) -> String {
    let printable: String = raw
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let folded = printable.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= MAX_REPLY_CHARS {
        return folded;
    }
    let mut cut: String = folded.chars().take(MAX_REPLY_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// Text on one line: control characters (a line break above all) become spaces, so that
/// in a header nothing can start a header of its own (lettre encodes the rest), and a
/// field name stays on its line of the plain-text part.
fn single_line(raw: &str) -> String {
    raw.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// What a notification is made of: the stored submission and where it goes.
#[derive(Debug, Clone)]
pub struct Notification<'a> {
    pub endpoint_name: &'a str,
    pub endpoint_id: &'a str,
    pub submission_id: &'a str,
    pub received_at: DateTime<Utc>,
    /// The stored form: `{"name": ["v1", "v2"], ...}`, names in the order they came.
    pub fields: &'a Value,
    pub to: Vec<String>,
    /// The field whose value, when it is exactly one plain address, becomes Reply-To.
    pub reply_to_field: Option<&'a str>,
    /// Names the Message-ID, so every attempt and replay of a delivery carries the same.
    pub delivery_id: &'a str,
    /// The From address's domain (`Mailer::message_domain`).
    pub message_domain: &'a str,
    /// The files uploaded with it: described and linked, never attached.
    pub files: &'a [crate::files::FileMetadata],
}

/// The email of one submission: a fixed Subject with the endpoint's name, a plain-text
/// and an HTML part listing every field and value in stored order, Reply-To from the
/// named field when it holds one address, and a Message-ID derived from the delivery.
pub fn notification(n: &Notification<'_>) -> OutgoingEmail {
    let subject = format!("New submission to {}", single_line(n.endpoint_name));
    let fields = stored_fields(n.fields);
    let received_at = n.received_at.to_rfc3339_opts(SecondsFormat::Secs, true);
    OutgoingEmail {
        to: n.to.clone(),
        text: plain_text(n, &subject, &received_at, &fields),
        html: html(n, &subject, &received_at, &fields),
        subject,
        reply_to: n
            .reply_to_field
            .and_then(|name| submitter_address(n.fields, name))
            .map(|address| address.to_string()),
        message_id: format!("<{}@{}>", n.delivery_id, n.message_domain),
    }
}

/// One field: its name and its values in the order they were sent.
pub(super) struct StoredField {
    pub(super) name: String,
    pub(super) values: Vec<String>,
}

/// The stored form as a list. Intake stores an object of lists of strings; anything else
/// is shown as its JSON rather than left out, so the message never hides a value.
pub(super) fn stored_fields(fields: &Value) -> Vec<StoredField> {
    let Some(object) = fields.as_object() else {
        return vec![StoredField {
            name: "(fields)".to_string(),
            values: vec![fields.to_string()],
        }];
    };
    let as_text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    object
        .iter()
        .map(|(name, values)| StoredField {
            name: name.clone(),
            values: match values {
                Value::Array(values) => values.iter().map(as_text).collect(),
                other => vec![as_text(other)],
            },
        })
        .collect()
}

/// An autoresponder's confirmation: the operator's fixed subject and text to the one
/// address the submission named. Nothing of the submission is in it, so a submitter
/// shapes no header, no subject and no word of it; it is sent to that address alone.
pub fn autoresponse(
    to: &Address,
    subject: &str,
    body: &str,
    delivery_id: &str,
    message_domain: &str,
) -> OutgoingEmail {
    let paragraphs: String = body
        .split("\n\n")
        .map(|paragraph| {
            format!(
                "<p>{}</p>",
                escape_html(paragraph.trim()).replace('\n', "<br>")
            )
        })
        .collect();
    OutgoingEmail {
        to: vec![to.to_string()],
        subject: single_line(subject),
        text: format!("{}\n", body.trim_end()),
        html: format!("<!DOCTYPE html><html><body>{paragraphs}</body></html>"),
        reply_to: None,
        message_id: format!("<{delivery_id}@{message_domain}>"),
    }
}

/// The value of `field` when it is exactly one value holding exactly one plain address
/// (`model::destination::plain_address`: a strict addr-spec, no display name, no list, no
/// line break, no encoded word). Anything else gives no Reply-To and no confirmation at
/// all, never a part of one. ASCII only: a non-ASCII header would need SMTPUTF8 of the
/// server, and a submitter could otherwise make the whole message unsendable to one that
/// lacks it.
pub fn submitter_address(fields: &Value, field: &str) -> Option<Address> {
    let [value] = fields.get(field)?.as_array()?.as_slice() else {
        return None;
    };
    plain_address(value.as_str()?)?.parse::<Address>().ok()
}

fn plain_text(
    n: &Notification<'_>,
    subject: &str,
    received_at: &str,
    fields: &[StoredField],
) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(text, "{subject}\n");
    let _ = writeln!(
        text,
        "Endpoint: {} ({})",
        single_line(n.endpoint_name),
        n.endpoint_id
    );
    let _ = writeln!(text, "Submission: {}", n.submission_id);
    let _ = writeln!(text, "Received: {received_at}");
    for field in fields {
        let _ = writeln!(text, "\n{}:", single_line(&field.name));
        for value in &field.values {
            // Each value indented, its own line breaks too, so where one value ends and
            // the next begins stays visible.
            let value = normalize_line_breaks(value);
            let _ = writeln!(text, "  {}", value.replace('\n', "\n  "));
        }
    }
    if !n.files.is_empty() {
        let _ = writeln!(text, "\nFiles:");
        for file in n.files {
            let _ = writeln!(
                text,
                "  {} ({}): {}, {} bytes, SHA-256 {}\n  {} (until {})",
                single_line(&file.name),
                single_line(&file.field),
                file.content_type,
                file.size,
                file.sha256,
                file.url,
                file.url_expires_at
            );
        }
    }
    let _ = write!(text, "\n-- \nHymical Forms, delivery {}\n", n.delivery_id);
    text
}

fn html(n: &Notification<'_>, subject: &str, received_at: &str, fields: &[StoredField]) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>{subject}</title>\n</head>\n<body>\n\
         <h1>{subject}</h1>\n\
         <p>Endpoint {name} (<code>{endpoint_id}</code>), submission <code>{submission_id}</code>, \
         received {received_at}.</p>\n\
         <table>\n",
        subject = escape_html(subject),
        name = escape_html(&single_line(n.endpoint_name)),
        endpoint_id = escape_html(n.endpoint_id),
        submission_id = escape_html(n.submission_id),
        received_at = escape_html(received_at),
    );
    for field in fields {
        let _ = write!(
            html,
            "<tr><th scope=\"row\" style=\"text-align:left;vertical-align:top\">{}</th><td>",
            escape_html(&field.name)
        );
        for value in &field.values {
            let _ = write!(
                html,
                "<div style=\"white-space:pre-wrap\">{}</div>",
                escape_html(&normalize_line_breaks(value))
            );
        }
        html.push_str("</td></tr>\n");
    }
    html.push_str("</table>\n");
    if !n.files.is_empty() {
        html.push_str("<h2>Files</h2>\n<ul>\n");
        for file in n.files {
            let _ = writeln!(
                html,
                "<li><a href=\"{url}\">{name}</a> ({field}): {kind}, {size} bytes, SHA-256 <code>{sha256}</code>, link valid until {until}</li>",
                url = escape_html(&file.url),
                name = escape_html(&file.name),
                field = escape_html(&file.field),
                kind = escape_html(&file.content_type),
                size = file.size,
                sha256 = escape_html(&file.sha256),
                until = escape_html(&file.url_expires_at),
            );
        }
        html.push_str("</ul>\n");
    }
    let _ = write!(
        html,
        "<p>Hymical Forms, delivery <code>{}</code></p>\n</body>\n</html>\n",
        escape_html(n.delivery_id)
    );
    html
}

/// The one escaping of text placed in HTML, in element content and attribute values alike.
/// The HTML part of a message whose text an operator's template wrote: that text as it
/// is, escaped, in a `<pre>`.
pub fn preformatted_html(subject: &str, text: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>{subject}</title>\n</head>\n<body>\n<pre>{text}</pre>\n</body>\n</html>\n",
        subject = escape_html(subject),
        text = escape_html(text)
    )
}

pub fn escape_html(raw: &str) -> String {
    let mut escaped = String::with_capacity(raw.len());
    for c in raw.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// CRLF and lone CR as LF, which lettre turns into CRLF on the wire.
fn normalize_line_breaks(raw: &str) -> String {
    raw.replace("\r\n", "\n").replace('\r', "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn fields() -> Value {
        json!({
            "name": ["Ada <b>x</b> & \"q\" 'y'"],
            "email": ["ada@example.org"],
            "topics": ["billing", "api"],
            "message": ["line one\r\nline two"],
        })
    }

    #[test]
    fn files_are_listed_with_their_links_never_attached() {
        let fields = fields();
        let files = [crate::files::FileMetadata {
            id: crate::model::ids::FileId::generate(),
            field: "cv".into(),
            name: "<b>cv</b>.pdf".into(),
            size: 1234,
            content_type: "application/pdf".into(),
            sha256: "ab".repeat(32),
            url: "https://forms.example.com/files/fil_x?expires=1&signature=s&x=<y>".into(),
            url_expires_at: "2026-08-31T14:34:27.000000Z".into(),
        }];
        let email = notification(&Notification {
            files: &files,
            ..sample(&fields, None)
        });
        assert!(
            email.text.contains(
                "Files:\n  <b>cv</b>.pdf (cv): application/pdf, 1234 bytes, SHA-256 abab"
            ),
            "{}",
            email.text
        );
        assert!(
            email
                .text
                .contains("https://forms.example.com/files/fil_x?expires=1&signature=s"),
            "{}",
            email.text
        );
        assert!(email.html.contains("<a href=\"https://forms.example.com/files/fil_x?expires=1&amp;signature=s&amp;x=&lt;y&gt;\">&lt;b&gt;cv&lt;/b&gt;.pdf</a>"), "{}", email.html);
        let without = notification(&sample(&fields, None));
        assert!(!without.text.contains("Files:") && !without.html.contains("<h2>Files"));
    }

    fn sample<'a>(fields: &'a Value, reply_to_field: Option<&'a str>) -> Notification<'a> {
        Notification {
            endpoint_name: "Contact <form>",
            endpoint_id: "contact",
            submission_id: "sub_0123",
            received_at: Utc
                .with_ymd_and_hms(2026, 8, 24, 14, 34, 27)
                .single()
                .expect("valid"),
            fields,
            to: vec!["ops@example.com".to_string()],
            reply_to_field,
            delivery_id: "whd_abc",
            message_domain: "example.com",
            files: &[],
        }
    }

    fn build(fields: &Value, reply_to_field: Option<&str>) -> OutgoingEmail {
        notification(&sample(fields, reply_to_field))
    }

    #[test]
    fn the_notification_lists_every_field_in_order() {
        let email = build(&fields(), Some("email"));
        assert_eq!(email.subject, "New submission to Contact <form>");
        assert_eq!(email.message_id, "<whd_abc@example.com>");
        assert_eq!(email.reply_to.as_deref(), Some("ada@example.org"));
        assert_eq!(email.to, ["ops@example.com"]);
        let positions: Vec<usize> = ["name:", "email:", "topics:", "message:"]
            .iter()
            .map(|name| email.text.find(name).expect(name))
            .collect();
        assert!(
            positions.windows(2).all(|pair| pair[0] < pair[1]),
            "{}",
            email.text
        );
        assert!(
            email.text.contains("  Ada <b>x</b> & \"q\" 'y'\n"),
            "{}",
            email.text
        );
        assert!(email.text.contains("  billing\n  api\n"), "{}", email.text);
        assert!(
            email.text.contains("  line one\n  line two\n"),
            "{}",
            email.text
        );
        assert!(
            email.text.contains("Received: 2026-08-24T14:34:27Z"),
            "{}",
            email.text
        );
    }

    #[test]
    fn html_escapes_every_name_and_value() {
        let fields = json!({
            "<script>alert(1)</script>": ["<script>alert(2)</script>"],
            "a&b": ["\"quoted\" & 'single'"],
        });
        let email = build(&fields, None);
        assert!(!email.html.contains("<script>"), "{}", email.html);
        assert!(email.html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(email.html.contains("&lt;script&gt;alert(2)&lt;/script&gt;"));
        assert!(email.html.contains("a&amp;b"));
        assert!(email
            .html
            .contains("&quot;quoted&quot; &amp; &#39;single&#39;"));
        assert!(email
            .html
            .contains("<title>New submission to Contact &lt;form&gt;</title>"));
        assert_eq!(escape_html("<&>\"'x"), "&lt;&amp;&gt;&quot;&#39;x");
    }

    #[test]
    fn the_subject_never_carries_what_was_submitted() {
        let fields = json!({"subject": ["Urgent\r\nBcc: x@example.org"]});
        let email = build(&fields, None);
        assert_eq!(email.subject, "New submission to Contact <form>");
        // Not even the operator's own endpoint name can break the header.
        let email = notification(&Notification {
            endpoint_name: "Contact\r\nBcc: x@example.org",
            ..sample(&fields, None)
        });
        assert_eq!(
            email.subject,
            "New submission to Contact  Bcc: x@example.org"
        );
        assert!(!email.subject.contains('\n'));
    }

    #[test]
    fn reply_to_is_one_plain_address_or_nothing() {
        for (value, expected) in [
            (json!(["visitor@example.org"]), Some("visitor@example.org")),
            (
                json!([" visitor@example.org "]),
                Some("visitor@example.org"),
            ),
            (json!(["a@x.com\r\nBcc: b@y.com"]), None),
            (json!(["a@x.com\nBcc: b@y.com"]), None),
            (json!(["a@x.com, b@y.com"]), None),
            (json!(["a@x.com; b@y.com"]), None),
            (json!(["Visitor <visitor@example.org>"]), None),
            (json!(["<visitor@example.org>"]), None),
            (json!(["not an address"]), None),
            (json!(["visitör@example.org"]), None),
            (json!([""]), None),
            (json!(["a@x.com", "b@y.com"]), None),
            (json!([]), None),
            (json!("a@x.com"), None),
        ] {
            let fields = json!({ "email": value });
            let email = build(&fields, Some("email"));
            assert_eq!(email.reply_to.as_deref(), expected, "{value}");
        }
        assert_eq!(build(&fields(), Some("missing")).reply_to, None);
        assert_eq!(build(&fields(), None).reply_to, None);
    }

    #[test]
    fn the_message_id_is_the_deliverys_on_every_attempt() {
        let first = build(&fields(), Some("email"));
        let again = build(&fields(), Some("email"));
        assert_eq!(first, again);
        assert_eq!(first.message_id, "<whd_abc@example.com>");
        assert!(is_message_id(&first.message_id));
        for bad in [
            "whd_abc@example.com",
            "<whd_abc>",
            "<a b@example.com>",
            "<a@b>\r\nX: y",
        ] {
            assert!(!is_message_id(bad), "{bad}");
        }
    }

    #[test]
    fn values_that_are_not_lists_of_strings_are_shown_as_json() {
        let email = build(&json!({ "n": [1, null], "flat": "x" }), None);
        assert!(email.text.contains("n:\n  1\n  null\n"), "{}", email.text);
        assert!(email.text.contains("flat:\n  x\n"), "{}", email.text);
        let email = build(&json!("not an object"), None);
        assert!(email.text.contains("\"not an object\""), "{}", email.text);
    }

    #[test]
    fn replies_are_bounded_and_printable() {
        assert_eq!(
            reply_text("250 2.0.0 Ok\r\n  queued\tas 1\u{7}"),
            "250 2.0.0 Ok queued as 1"
        );
        let long = "x".repeat(2_000);
        let text = reply_text(&long);
        assert_eq!(text.chars().count(), MAX_REPLY_CHARS);
        assert!(text.ends_with('…'));
    }

    #[test]
    fn recipients_are_one_mailbox_each() {
        assert!(mailbox("ops@example.com").is_some());
        assert!(mailbox("Ops <ops@example.com>").is_some());
        for bad in [
            "ops@example.com\r\nBcc: x@y.com",
            "a@x.com, b@y.com",
            "nobody",
            "",
        ] {
            assert!(mailbox(bad).is_none(), "{bad}");
        }
    }
}
