//! Email over SMTP against a real server: the `Mailer`, configured through
//! `Config::from_lookup` and `FORMS_SMTP_*`, sends to aiosmtpd (tests/smtp-server/serve.py,
//! Debian's python3-aiosmtpd, installed by `cargo xtask setup`), which is scripted to
//! accept, defer, refuse, hang, require STARTTLS or AUTH, and which writes each message it
//! accepts, with its envelope and its MIME parts as Python's email package reads them, for
//! the test to read back (tests/support/src/smtp_server.rs).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use hymical_forms::testing::config::Config;
use hymical_forms::testing::delivery::email::{
    notification, MailOutcome, Mailer, Notification, OutgoingEmail,
};
use serde_json::{json, Value};

use support::smtp_server::SmtpServer;

const DELIVERY_ID: &str = "whd_0190f1a2b3c4d5e6f708192a3b4c5d6e";

/// A mailer from `FORMS_SMTP_*` as an operator sets them: plaintext to the loopback
/// server unless `vars` say otherwise (a later pair replaces an earlier one).
fn mailer(server: &SmtpServer, vars: &[(&str, &str)]) -> Mailer {
    let port = server.port();
    let all: HashMap<String, String> = [
        ("FORMS_SMTP_HOST", "127.0.0.1"),
        ("FORMS_SMTP_PORT", port.as_str()),
        ("FORMS_SMTP_TLS", "none"),
        ("FORMS_SMTP_FROM", "Hymical Forms <forms@example.com>"),
        ("FORMS_SMTP_TIMEOUT_SECONDS", "10"),
    ]
    .into_iter()
    .chain(vars.iter().copied())
    .map(|(name, value)| (name.to_string(), value.to_string()))
    .collect();
    let config = Config::from_lookup(|name| all.get(name).cloned()).unwrap();
    Mailer::new(config.smtp.as_ref().expect("FORMS_SMTP_HOST is set")).unwrap()
}

fn submission(
    mailer: &Mailer,
    fields: &Value,
    to: &[&str],
    reply_to_field: Option<&str>,
) -> OutgoingEmail {
    notification_from(mailer.message_domain(), fields, to, reply_to_field)
}

/// The notification of the test submission, its message ids in `message_domain`.
fn notification_from(
    message_domain: &str,
    fields: &Value,
    to: &[&str],
    reply_to_field: Option<&str>,
) -> OutgoingEmail {
    notification(&Notification {
        endpoint_name: "Contact form",
        endpoint_id: "contact-form",
        submission_id: "sub_48984534f33749c49a88de2d59400dce",
        received_at: Utc.with_ymd_and_hms(2026, 8, 24, 14, 34, 27).unwrap(),
        fields,
        to: to.iter().map(|to| to.to_string()).collect(),
        reply_to_field,
        delivery_id: DELIVERY_ID,
        message_domain,
        files: &[],
    })
}

fn simple(mailer: &Mailer) -> OutgoingEmail {
    submission(
        mailer,
        &json!({"email": ["visitor@example.org"], "message": ["Hello"]}),
        &["ops@example.com"],
        Some("email"),
    )
}

/// Every value of the header `name` in a spooled message.
fn headers<'a>(message: &'a Value, name: &str) -> Vec<&'a str> {
    message["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|pair| pair[0].as_str().unwrap().eq_ignore_ascii_case(name))
        .map(|pair| pair[1].as_str().unwrap())
        .collect()
}

fn header<'a>(message: &'a Value, name: &str) -> &'a str {
    let values = headers(message, name);
    assert_eq!(values.len(), 1, "{name}: {values:?}");
    values[0]
}

fn assert_accepted(outcome: &MailOutcome) {
    assert!(
        matches!(outcome, MailOutcome::Accepted { code: 250, text } if text.contains("accepted")),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_notification_arrives_with_every_field_escaped() {
    let server = SmtpServer::start(&[]);
    let mailer = mailer(&server, &[]);
    let fields = json!({
        "name": ["Ada Lovelace"],
        "message": ["<b>x</b> & \"q\""],
        "email": ["visitor@example.org"],
        "topics": ["billing", "api"],
    });
    let email = submission(
        &mailer,
        &fields,
        &["ops@example.com", "Second Desk <desk@example.net>"],
        Some("email"),
    );
    assert_accepted(&mailer.send(&email).await);

    let messages = server.messages();
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    assert_eq!(message["mail_from"], "forms@example.com");
    assert_eq!(
        message["rcpt_tos"],
        json!(["ops@example.com", "desk@example.net"])
    );
    assert_eq!(header(message, "Subject"), "New submission to Contact form");
    assert_eq!(header(message, "From"), "Hymical Forms <forms@example.com>");
    assert_eq!(
        header(message, "To"),
        "ops@example.com, Second Desk <desk@example.net>"
    );
    assert_eq!(header(message, "Reply-To"), "visitor@example.org");
    assert_eq!(
        header(message, "Message-ID"),
        format!("<{DELIVERY_ID}@example.com>")
    );
    assert!(!header(message, "Date").is_empty());
    assert_eq!(message["content_type"], "multipart/alternative");

    let parts = message["parts"].as_array().unwrap();
    let types: Vec<&str> = parts
        .iter()
        .map(|part| part["content_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["text/plain", "text/html"]);
    // Python keeps the wire's CRLF in decoded text.
    let plain = parts[0]["text"].as_str().unwrap().replace("\r\n", "\n");
    let html = parts[1]["text"].as_str().unwrap().replace("\r\n", "\n");
    let (plain, html) = (plain.as_str(), html.as_str());
    for text in [
        "name:",
        "Ada Lovelace",
        "message:",
        "<b>x</b> & \"q\"",
        "email:",
        "topics:",
        "  billing\n  api\n",
    ] {
        assert!(plain.contains(text), "{text:?} in {plain}");
    }
    for text in [
        "Ada Lovelace",
        "&lt;b&gt;x&lt;/b&gt; &amp; &quot;q&quot;",
        ">billing</div><div style=\"white-space:pre-wrap\">api<",
        "<code>sub_48984534f33749c49a88de2d59400dce</code>",
    ] {
        assert!(html.contains(text), "{text:?} in {html}");
    }
    assert!(!html.contains("<b>x</b>"), "{html}");
    // Fields appear in stored order in both parts.
    for (part, names) in [
        (plain, ["\nname:", "\nmessage:", "\nemail:", "\ntopics:"]),
        (html, [">name<", ">message<", ">email<", ">topics<"]),
    ] {
        let at: Vec<usize> = names.iter().map(|name| part.find(name).unwrap()).collect();
        assert!(at.windows(2).all(|pair| pair[0] < pair[1]), "{part}");
    }
}

#[tokio::test]
async fn a_reply_to_field_cannot_add_a_header_or_a_recipient() {
    let server = SmtpServer::start(&[]);
    let mailer = mailer(&server, &[]);
    for value in ["a@x.com\r\nBcc: b@y.com", "a@x.com, b@y.com", "A <a@x.com>"] {
        let fields = json!({ "email": [value] });
        let email = submission(&mailer, &fields, &["ops@example.com"], Some("email"));
        assert_eq!(email.reply_to, None, "{value:?}");
        assert_accepted(&mailer.send(&email).await);
    }
    let messages = server.messages();
    assert_eq!(messages.len(), 3);
    for message in &messages {
        assert!(headers(message, "Reply-To").is_empty(), "{message}");
        assert!(headers(message, "Bcc").is_empty(), "{message}");
        assert_eq!(message["rcpt_tos"], json!(["ops@example.com"]));
        let raw = message["raw"].as_str().unwrap();
        let (head, _) = raw.split_once("\r\n\r\n").unwrap();
        assert!(
            !head.contains("b@y.com") && !head.contains("a@x.com"),
            "{head}"
        );
    }
}

#[tokio::test]
async fn a_deferred_message_is_sent_once_on_retry_with_the_same_message_id() {
    let server = SmtpServer::start(&["--script", "451,250"]);
    let mailer = mailer(&server, &[]);
    let first = simple(&mailer);
    let outcome = mailer.send(&first).await;
    assert!(
        matches!(&outcome, MailOutcome::Deferred { code: 451, text } if text.contains("Scripted deferral of DATA")),
        "{outcome:?}"
    );
    assert!(server.messages().is_empty());

    // The retry builds the message again from the same stored delivery.
    let retry = simple(&mailer);
    assert_eq!(retry.message_id, first.message_id);
    assert_accepted(&mailer.send(&retry).await);
    let messages = server.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(header(&messages[0], "Message-ID"), first.message_id);
}

#[tokio::test]
async fn a_rejected_message_carries_the_servers_reply() {
    let server = SmtpServer::start(&["--script", "550"]);
    let mailer = mailer(&server, &[]);
    let outcome = mailer.send(&simple(&mailer)).await;
    assert_eq!(
        outcome,
        MailOutcome::Rejected {
            code: 550,
            text: "5.7.1 Scripted rejection of DATA".to_string()
        }
    );
    assert!(server.messages().is_empty());
}

#[tokio::test]
async fn a_refused_recipient_decides_for_the_whole_message() {
    let server = SmtpServer::start(&["--reply-rcpt", "250,550,451"]);
    let mailer = mailer(&server, &[]);
    let fields = json!({"message": ["Hello"]});
    let both = submission(
        &mailer,
        &fields,
        &["ops@example.com", "gone@example.net"],
        None,
    );
    let outcome = mailer.send(&both).await;
    assert!(
        matches!(&outcome, MailOutcome::Rejected { code: 550, text } if text.contains("RCPT")),
        "{outcome:?}"
    );
    let outcome = mailer.send(&simple(&mailer)).await;
    assert!(
        matches!(&outcome, MailOutcome::Deferred { code: 451, text } if text.contains("RCPT")),
        "{outcome:?}"
    );
    // The recipient that was accepted got nothing: no DATA followed.
    assert!(server.messages().is_empty());
}

#[tokio::test]
async fn a_server_that_stops_answering_times_out() {
    for hang in ["greeting", "data"] {
        let server = SmtpServer::start(&["--hang", hang]);
        let mailer = mailer(&server, &[("FORMS_SMTP_TIMEOUT_SECONDS", "1")]);
        let started = Instant::now();
        let outcome = mailer.send(&simple(&mailer)).await;
        assert_eq!(outcome, MailOutcome::TimedOut, "hang {hang}");
        // Loose on purpose: only that the deadline ends the attempt.
        assert!(started.elapsed() < Duration::from_secs(10), "hang {hang}");
        assert!(server.messages().is_empty());
    }
}

#[tokio::test]
async fn a_closed_port_is_a_connection_failure() {
    let server = SmtpServer::start(&[]);
    let mailer = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = listener.local_addr().unwrap().port().to_string();
        drop(listener);
        mailer(&server, &[("FORMS_SMTP_PORT", closed.as_str())])
    };
    let outcome = mailer.send(&simple(&mailer)).await;
    assert!(
        matches!(&outcome, MailOutcome::ConnectionFailed { reason } if !reason.is_empty()),
        "{outcome:?}"
    );
}

/// A CA and a server certificate it signed for localhost and 127.0.0.1, as PEM files.
struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    fn new() -> Certificates {
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Hymical test mail CA");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let server_params =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .unwrap();
        let server_key = rcgen::KeyPair::generate().unwrap();
        let server = server_params.signed_by(&server_key, &issuer).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("server.pem"), server.pem()).unwrap();
        std::fs::write(dir.path().join("server.key"), server_key.serialize_pem()).unwrap();
        Certificates { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }
}

#[tokio::test]
async fn starttls_is_verified_against_the_configured_ca() {
    let certificates = Certificates::new();
    let (cert, key, ca) = (
        certificates.path("server.pem"),
        certificates.path("server.key"),
        certificates.path("ca.pem"),
    );
    let server = SmtpServer::start(&["--starttls", &cert, &key]);
    // By name, so the certificate's DNS name is what is checked.
    let trusting = mailer(
        &server,
        &[
            ("FORMS_SMTP_HOST", "localhost"),
            ("FORMS_SMTP_TLS", "starttls"),
            ("FORMS_SMTP_CA_FILE", &ca),
        ],
    );
    assert_accepted(&trusting.send(&simple(&trusting)).await);
    assert_eq!(server.messages().len(), 1);

    // The same server, trusted through the Mozilla roots only: its CA is nobody's.
    let default_roots = mailer(&server, &[("FORMS_SMTP_TLS", "starttls")]);
    let outcome = default_roots.send(&simple(&default_roots)).await;
    assert!(
        matches!(&outcome, MailOutcome::ConnectionFailed { reason } if reason.contains("certificate")),
        "{outcome:?}"
    );
    assert_eq!(server.messages().len(), 1);
}

#[tokio::test]
async fn implicit_tls_is_verified_against_the_configured_ca() {
    let certificates = Certificates::new();
    let (cert, key, ca) = (
        certificates.path("server.pem"),
        certificates.path("server.key"),
        certificates.path("ca.pem"),
    );
    let server = SmtpServer::start(&["--tls", &cert, &key]);
    let mailer = mailer(
        &server,
        &[("FORMS_SMTP_TLS", "tls"), ("FORMS_SMTP_CA_FILE", &ca)],
    );
    assert_accepted(&mailer.send(&simple(&mailer)).await);
    assert_eq!(server.messages().len(), 1);
}

#[tokio::test]
async fn tls_is_never_given_up_for_plaintext() {
    let certificates = Certificates::new();
    let ca = certificates.path("ca.pem");
    let server = SmtpServer::start(&[]);
    for (mode, expected) in [("starttls", "STARTTLS"), ("tls", "")] {
        let mailer = mailer(
            &server,
            &[("FORMS_SMTP_TLS", mode), ("FORMS_SMTP_CA_FILE", &ca)],
        );
        let outcome = mailer.send(&simple(&mailer)).await;
        assert!(
            matches!(&outcome, MailOutcome::ConnectionFailed { reason } if reason.contains(expected)),
            "{mode}: {outcome:?}"
        );
    }
    assert!(server.messages().is_empty());
}

#[tokio::test]
async fn auth_with_the_right_and_a_wrong_password() {
    let certificates = Certificates::new();
    let (cert, key, ca) = (
        certificates.path("server.pem"),
        certificates.path("server.key"),
        certificates.path("ca.pem"),
    );
    let server = SmtpServer::start(&["--starttls", &cert, &key, "--auth", "forms:correct horse"]);
    let with_password = |password: &str| {
        mailer(
            &server,
            &[
                ("FORMS_SMTP_TLS", "starttls"),
                ("FORMS_SMTP_CA_FILE", &ca),
                ("FORMS_SMTP_USERNAME", "forms"),
                ("FORMS_SMTP_PASSWORD", password),
            ],
        )
    };

    let right = with_password("correct horse");
    assert_accepted(&right.send(&simple(&right)).await);

    let wrong = with_password("battery staple");
    let outcome = wrong.send(&simple(&wrong)).await;
    assert!(
        matches!(&outcome, MailOutcome::Rejected { code: 535, text } if !text.contains("staple")),
        "{outcome:?}"
    );

    // No credentials at all: the server wants AUTH before MAIL.
    let anonymous = mailer(
        &server,
        &[("FORMS_SMTP_TLS", "starttls"), ("FORMS_SMTP_CA_FILE", &ca)],
    );
    let outcome = anonymous.send(&simple(&anonymous)).await;
    assert!(
        matches!(&outcome, MailOutcome::Rejected { code: 530, .. }),
        "{outcome:?}"
    );
    assert_eq!(server.messages().len(), 1);
}

#[tokio::test]
async fn a_message_that_cannot_be_made_is_never_sent() {
    let server = SmtpServer::start(&[]);
    let mailer = mailer(&server, &[]);
    let mut email = simple(&mailer);
    email.to = vec!["ops@example.com\r\nBcc: b@y.com".to_string()];
    let outcome = mailer.send(&email).await;
    assert!(
        matches!(&outcome, MailOutcome::Unsendable { reason } if !reason.contains("b@y.com")),
        "{outcome:?}"
    );
    email.to.clear();
    assert!(matches!(
        mailer.send(&email).await,
        MailOutcome::Unsendable { .. }
    ));
    assert!(server.messages().is_empty());
}

/// A mail server and the app of the autoresponder tests (with an admin key): that mail
/// server, no rate limits (so that the autoresponder's own window is what is tested),
/// and the endpoint `contact` with an email destination to desk@example.com (Reply-To
/// from `email`) and an autoresponder on `email` with a window of an hour.
async fn autoresponder_app() -> (SmtpServer, support::harness::TestApp, String) {
    let server = SmtpServer::start(&[]);
    let port = server.port();
    let app = support::harness::TestApp::start_with(
        &[
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_SMTP_HOST", "127.0.0.1"),
            ("FORMS_SMTP_PORT", &port),
            ("FORMS_SMTP_TLS", "none"),
            ("FORMS_SMTP_FROM", "Hymical Forms <forms@example.com>"),
            ("FORMS_SMTP_TIMEOUT_SECONDS", "5"),
        ],
        std::sync::Arc::new(hymical_forms::testing::clock::SystemClock),
    )
    .await;
    let (_, key) = app.create_key("autoresponder").await;
    for (query, input) in [
        (
            "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id } } }",
            json!({ "id": "contact", "name": "Contact" }),
        ),
        (
            "mutation($input: AddEmailDestinationInput!) { addEmailDestination(input: $input) { destination { id } } }",
            json!({ "endpointId": "contact", "recipients": ["desk@example.com"] }),
        ),
        (
            "mutation($input: AddAutoresponderDestinationInput!) { addAutoresponderDestination(input: $input) { destination { id } } }",
            json!({ "endpointId": "contact", "subject": "Thank you", "body": "We have it.", "windowSeconds": 3600 }),
        ),
    ] {
        let answer = app.gql(&key, query, json!({ "input": input })).await;
        assert!(answer.get("errors").is_none(), "{answer}");
    }
    (server, app, key)
}

/// Runs a worker of `app` until a round runs nothing (at most 20 rounds); answers how
/// many deliveries it ran.
async fn deliver_all(app: &support::harness::TestApp) -> usize {
    let worker = app.worker(None);
    let mut sent = 0;
    for _ in 0..20 {
        let ran = worker.run_once().await.unwrap();
        sent += ran;
        if ran == 0 {
            break;
        }
    }
    sent
}

/// A form body with `email` set to `address`, encoded as a browser would.
fn email_form(address: &str) -> String {
    let encoded: String = url::form_urlencoded::byte_serialize(address.as_bytes()).collect();
    format!("email={encoded}&message=hello")
}

/// The spooled messages that went to `rcpt`, and those that went to anyone else.
fn split_by_recipient(server: &SmtpServer, rcpt: &str) -> (Vec<Value>, Vec<Value>) {
    server
        .messages()
        .into_iter()
        .partition(|message| message["rcpt_tos"] == json!([rcpt]))
}

/// Plus-addressing, letter case and dots in the local part name one mailbox as far as
/// the autoresponder's window goes (docs/delivery.md, "Autoresponders"): one
/// confirmation for them all within the window, while another address gets its own.
#[tokio::test(flavor = "multi_thread")]
async fn plus_addressed_variants_of_one_address_get_one_confirmation_per_window() {
    let (server, app, _) = autoresponder_app().await;
    let variants = [
        "victim@example.org",
        "victim+1@example.org",
        "victim+2@example.org",
        "Victim+3@Example.ORG",
        "vic.tim+4@example.org",
        "v.i.c.t.i.m@example.org",
        "victim+@example.org",
        "victim+a+b@example.org",
    ];
    for address in variants {
        app.submit("contact", &email_form(address)).await;
    }
    app.submit("contact", &email_form("someone.else@example.org"))
        .await;
    // Every submission's notification, one confirmation for the victim, one for the
    // other address.
    assert_eq!(deliver_all(&app).await, variants.len() + 1 + 2);
    let (to_desk, confirmations) = split_by_recipient(&server, "desk@example.com");
    assert_eq!(to_desk.len(), variants.len() + 1);
    let mut recipients: Vec<String> = confirmations
        .iter()
        .map(|m| m["rcpt_tos"].to_string())
        .collect();
    recipients.sort();
    assert_eq!(
        recipients,
        [
            json!(["someone.else@example.org"]).to_string(),
            json!(["victim@example.org"]).to_string()
        ],
        "one confirmation per mailbox, to the address as the first submission wrote it"
    );
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM autoresponder_recipients")
            .await,
        2
    );
}

/// Only a plain address is answered or put in a Reply-To: RFC 2047 encoded words (which a
/// decoding mail server could turn into a line break and a command), quoted local parts,
/// comments, domain literals, dots out of place and single-label domains are refused.
/// The submission itself is accepted and stored as any other (the address is a value
/// like any other): its notification goes out without Reply-To, and no confirmation goes
/// to anyone.
#[tokio::test(flavor = "multi_thread")]
async fn an_address_that_is_not_plain_gets_no_confirmation_and_no_reply_to() {
    let (server, app, key) = autoresponder_app().await;
    let refused = [
        "=?utf-8?q?victim=0D=0ARCPT=20TO=3Ax=40evil.example?=@example.org",
        "=?utf-8?b?dmljdGltDQpSQ1BUIFRPOng=?=@example.org",
        "victim=?utf-8?q?x?=@example.org",
        "\"victim\"@example.org",
        "\"a b\"@example.org",
        "victim(comment)@example.org",
        "victim@[127.0.0.1]",
        "victim@localhost",
        ".victim@example.org",
        "victim.@example.org",
        "vic..tim@example.org",
        "victim@-example.org",
        "victim@example-.org",
        "victim@example..org",
        "victim@exa_mple.org",
        "victim@@example.org",
        "victim\t@example.org",
        "vïctim@example.org",
    ];
    let mut stored = Vec::new();
    for address in refused {
        stored.push(app.submit("contact", &email_form(address)).await);
    }
    deliver_all(&app).await;
    let (to_desk, others) = split_by_recipient(&server, "desk@example.com");
    assert!(others.is_empty(), "no confirmation: {others:#?}");
    assert_eq!(to_desk.len(), refused.len(), "each notification went out");
    for message in &to_desk {
        assert!(headers(message, "Reply-To").is_empty(), "{message}");
        let raw = message["raw"].as_str().unwrap();
        let (head, _) = raw.split_once("\r\n\r\n").unwrap();
        assert!(!head.contains("=?"), "{head}");
    }
    // Each submission is stored with its value, as submitted.
    for (id, address) in stored.iter().zip(refused) {
        let answer = app
            .gql(
                &key,
                "query($id: ID!) { submission(id: $id) { fields { name values } deliveries { destination { kind } } } }",
                json!({ "id": id }),
            )
            .await;
        let submission = &answer["data"]["submission"];
        assert_eq!(
            submission["fields"][0]["values"],
            json!([address]),
            "{answer}"
        );
        assert_eq!(
            submission["deliveries"],
            json!([{ "destination": { "kind": "EMAIL" } }]),
            "{address}: no delivery for the autoresponder"
        );
    }
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM autoresponder_recipients")
            .await,
        0
    );
}

/// The notification's Reply-To takes the same rule, as the message is made.
#[test]
fn an_encoded_word_is_never_a_reply_to() {
    // The Reply-To of the notification of a submission whose `email` is `address`.
    let reply_to = |address: &str| {
        notification_from(
            "example.com",
            &json!({ "email": [address] }),
            &["ops@example.com"],
            Some("email"),
        )
        .reply_to
    };
    for address in [
        "=?utf-8?q?victim=0D=0ARCPT=20TO=3Ax=40evil.example?=@example.org",
        "a=?x?=@example.org",
        "\"victim\"@example.org",
        "victim@localhost",
    ] {
        assert_eq!(reply_to(address), None, "{address}");
    }
    // A plain address, plus tag and all, is kept as written.
    assert_eq!(
        reply_to(" Visitor.Name+forms@xn--bcher-kva.example").as_deref(),
        Some("Visitor.Name+forms@xn--bcher-kva.example")
    );
}

/// The intake statement (`submitted_address`) and the worker (`plain_address`) take the
/// same addresses: what intake queues a confirmation for, the worker sends, and what it
/// refuses, the worker would too.
#[tokio::test]
async fn the_intake_statement_and_the_worker_agree_on_plain_addresses() {
    use hymical_forms::testing::model::destination::plain_address;
    let db = support::harness::TestDb::new().await;
    let long_local = format!("{}@example.org", "a".repeat(65));
    let longest_local = format!("{}@example.org", "a".repeat(64));
    let long_label = format!("a@{}.org", "b".repeat(64));
    let labels: Vec<String> = std::iter::repeat_n("b".repeat(60), 5).collect();
    let long = format!("a@{}.org", labels.join("."));
    let addresses = [
        "visitor@example.org",
        " Visitor.Name+forms@example.org ",
        "o'brien@mail.example.co.uk",
        "a@xn--bcher-kva.example",
        "x!#$%&'*+-/=^_`{|}~?@example.org",
        "=?utf-8?q?victim=0D=0ARCPT=20TO=3Ax?=@example.org",
        "victim=?x@example.org",
        "victim?=@example.org",
        "\"victim\"@example.org",
        "victim(comment)@example.org",
        "victim@[127.0.0.1]",
        "victim@localhost",
        ".victim@example.org",
        "victim.@example.org",
        "vic..tim@example.org",
        "victim@-example.org",
        "victim@example-.org",
        "victim@example.org.",
        "victim@exa_mple.org",
        "victim@@example.org",
        "vic tim@example.org",
        "victim\t@example.org",
        "victim@example.org\r\nBcc: x@example.org",
        "vïctim@example.org",
        "victim@bücher.example",
        "Victim <victim@example.org>",
        "a@x.org, b@y.org",
        "",
        &long_local,
        &longest_local,
        &long_label,
        &long,
    ];
    for address in addresses {
        let fields = json!({ "email": [address] })
            .to_string()
            .replace('\'', "''");
        let by_intake = db
            .count(&format!(
                "SELECT count(*) AS n WHERE submitted_address('{fields}'::json, 'email') IS NOT NULL"
            ))
            .await;
        assert_eq!(
            by_intake == 1,
            plain_address(address).is_some(),
            "{address:?}"
        );
    }
    // One mailbox, one key, whatever the spelling; another mailbox, another key.
    let keys = db
        .count(
            "SELECT count(DISTINCT autoresponder_address_digest(a)) AS n FROM unnest(ARRAY[\
             'victim@example.org', 'Victim@Example.ORG', 'victim+1@example.org', \
             'v.i.c.t.i.m+x.y@example.org', 'victim+@example.org']) AS a",
        )
        .await;
    assert_eq!(keys, 1);
    let keys = db
        .count(
            "SELECT count(DISTINCT autoresponder_address_digest(a)) AS n FROM unnest(ARRAY[\
             'victim@example.org', 'victim@example.net', 'victim-1@example.org']) AS a",
        )
        .await;
    assert_eq!(keys, 3);
}
