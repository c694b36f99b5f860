//! Every input field of every mutation, sent with a bad value, is refused with an error
//! that names the field the client sent (docs/graphql.md, "Errors"). The mutations, their
//! arguments and the fields of their input objects are read from the running server's
//! schema by introspection, so a new mutation or field cannot escape: each one needs an
//! entry in `cases` (a bad value, or an exemption with its reason), or this test fails.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use hymical_forms::testing::clock::SystemClock;
use serde_json::{json, Value};

use support::harness::TestApp;
use support::smtp_server::SmtpServer;

/// What one field is sent with, and what must come back.
enum Case {
    /// A value breaking the field's rule: `INVALID_INPUT` (or `INVALID_WEBHOOK_URL`) with
    /// `details.field` the field's path as the client wrote it.
    Bad(Value),
    /// A value refused with a code of its own that names no field (an id that names
    /// nothing, a time range that is inverted); a `details.field`, if any, must still be
    /// the field's path.
    Refused(Value, &'static str),
    /// No value of the field's type breaks a rule: why.
    Exempt(&'static str),
}
use Case::{Bad, Exempt, Refused};

const BOOLEAN: &str = "a Boolean: both values are valid";
const ENUM: &str = "an enum: every value GraphQL lets through is valid";
const ONE_OF: &str = "a member of a oneOf input beside the valid one: set here, the document names two members and GraphQL refuses it; its bad values are refused by name in receivers.rs";
const FILTER_ID: &str =
    "narrows a filter: an id that names nothing matches nothing (count 0), as a filter should";

/// The type of an argument or input field, as introspection nests it.
fn type_text(ty: &Value) -> String {
    match ty["kind"].as_str().unwrap() {
        "NON_NULL" => format!("{}!", type_text(&ty["ofType"])),
        "LIST" => format!("[{}]", type_text(&ty["ofType"])),
        _ => ty["name"].as_str().unwrap().to_string(),
    }
}

/// The named type under the wrappers, and whether it is an input object.
fn named(ty: &Value) -> (&str, bool) {
    match ty["kind"].as_str().unwrap() {
        "NON_NULL" | "LIST" => named(&ty["ofType"]),
        kind => (ty["name"].as_str().unwrap(), kind == "INPUT_OBJECT"),
    }
}

/// The leaf fields under an input object type, as dotted paths below `prefix`.
fn leaves(
    input_types: &BTreeMap<String, Vec<Value>>,
    ty: &Value,
    prefix: &str,
    out: &mut Vec<String>,
) {
    let (name, is_input) = named(ty);
    if !is_input {
        out.push(prefix.to_string());
        return;
    }
    for field in &input_types[name] {
        let path = match prefix {
            "" => field["name"].as_str().unwrap().to_string(),
            _ => format!("{prefix}.{}", field["name"].as_str().unwrap()),
        };
        leaves(input_types, &field["type"], &path, out);
    }
}

/// Sets `path` (dotted) inside `root`, making the objects on the way.
fn set_path(root: &mut Value, path: &str, value: Value) {
    let mut at = root;
    let parts: Vec<&str> = path.split('.').collect();
    for part in &parts[..parts.len() - 1] {
        if at.get(*part).is_none_or(Value::is_null) {
            at[*part] = json!({});
        }
        at = &mut at[*part];
    }
    at[parts[parts.len() - 1]] = value;
}

/// The path a client sees for a leaf: a field of the `input` argument by its path inside
/// it, any other argument by its own name first.
fn client_path(argument: &str, inner: &str) -> String {
    match (argument, inner) {
        ("input", inner) => inner.to_string(),
        (argument, "") => argument.to_string(),
        (argument, inner) => format!("{argument}.{inner}"),
    }
}

const INTROSPECTION: &str = "
fragment Ref on __Type { kind name ofType { kind name ofType { kind name ofType { kind name } } } }
{ __schema {
    mutationType { fields { name args { name type { ...Ref } } } }
    types { name kind inputFields { name type { ...Ref } } }
} }";

#[tokio::test(flavor = "multi_thread")]
async fn every_mutation_input_field_is_named_in_its_error() {
    let smtp = SmtpServer::start(&[]);
    let port = smtp.port();
    let app = TestApp::start_with(
        &[
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
            ("FORMS_SMTP_HOST", "127.0.0.1"),
            ("FORMS_SMTP_PORT", &port),
            ("FORMS_SMTP_TLS", "none"),
            ("FORMS_SMTP_FROM", "Hymical Forms <forms@example.com>"),
        ],
        Arc::new(SystemClock),
    )
    .await;
    let (key_id, key) = app.create_key("input-errors").await;
    let project = app
        .gql(
            &key,
            r#"mutation { createProject(name: "Agency") { id } }"#,
            json!({}),
        )
        .await;
    let project = project["data"]["createProject"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{project}"))
        .to_string();

    // What the valid arguments refer to: an endpoint with a webhook, a submission, its
    // delivery.
    let created = app
        .gql(
            &key,
            "mutation { createEndpoint(input: { id: \"contact\", name: \"Contact\", webhookUrl: \"http://127.0.0.1:9/hook\" }) { endpoint { destinations { id } } } }",
            json!({}),
        )
        .await;
    let destination = created["data"]["createEndpoint"]["endpoint"]["destinations"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_string();
    let submission = app.submit("contact", "email=visitor%40example.org").await;
    let answer = app
        .gql(
            &key,
            "query($id: ID!) { submission(id: $id) { delivery { id } } }",
            json!({ "id": submission }),
        )
        .await;
    let delivery = answer["data"]["submission"]["delivery"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_string();

    // Valid arguments of each mutation, every input object filled in: a case replaces one
    // leaf of them with its bad value.
    let endpoint_settings = json!({
        "name": "Contact", "isActive": true, "webhookUrl": "http://127.0.0.1:9/hook",
        "redirectUrl": "https://site.example/thanks", "allowedOrigins": ["https://site.example"],
        "honeypotField": "website", "retentionDays": 90, "spamRetentionDays": 7,
        "fileUploads": { "maxFiles": 2, "maxFileBytes": 1000, "maxTotalBytes": 2000,
                         "allowedTypes": ["image/png"] },
    });
    let with = |mut settings: Value, extra: Value| {
        for (name, value) in extra.as_object().unwrap() {
            settings[name] = value.clone();
        }
        settings
    };
    // A client certificate with its key and a CA, each valid, so that each of their
    // fields can be set wrong on its own.
    let identity = rcgen::generate_simple_self_signed(vec!["forms.example".to_string()]).unwrap();
    let (client_certificate, client_key) =
        (identity.cert.pem(), identity.signing_key.serialize_pem());
    let other_key = rcgen::KeyPair::generate().unwrap().serialize_pem();
    let valid: BTreeMap<&str, Value> = BTreeMap::from([
        (
            "createEndpoint",
            json!({ "input": with(endpoint_settings.clone(), json!({ "id": "fresh" })) }),
        ),
        (
            "updateEndpoint",
            json!({ "input": with(endpoint_settings.clone(), json!({ "id": "contact" })) }),
        ),
        (
            "rotateWebhookSecret",
            json!({ "endpointId": "contact", "overlapSeconds": 60 }),
        ),
        (
            "endWebhookSecretOverlap",
            json!({ "endpointId": "contact" }),
        ),
        ("pauseEndpoint", json!({ "endpointId": "contact" })),
        ("resumeEndpoint", json!({ "endpointId": "contact" })),
        (
            "deleteEndpoint",
            json!({ "input": { "id": "contact", "history": "KEEP", "cancelDeliveries": false } }),
        ),
        (
            "replayDelivery",
            json!({ "id": delivery, "destination": "SNAPSHOT" }),
        ),
        (
            "replayDeliveries",
            json!({
                "filter": { "endpointId": "contact", "destinationId": destination,
                            "failedAfter": "2000-01-01T00:00:00Z", "failedBefore": "2100-01-01T00:00:00Z",
                            "createdAfter": "2000-01-01T00:00:00Z", "createdBefore": "2100-01-01T00:00:00Z" },
                "dryRun": true, "destination": "SNAPSHOT",
            }),
        ),
        ("deleteSubmission", json!({ "id": submission })),
        ("erasePersonData", json!({ "value": "visitor@example.org" })),
        ("createProject", json!({ "name": "Studio" })),
        ("renameProject", json!({ "id": project, "name": "Studio" })),
        ("deleteProject", json!({ "id": project })),
        (
            "createApiKey",
            json!({ "input": { "name": "ci", "role": "READ", "projectId": project,
                               "expiresAt": "2100-01-01T00:00:00Z" } }),
        ),
        (
            "updateApiKey",
            json!({ "input": { "id": key_id, "name": "ops", "expiresAt": "2100-01-01T00:00:00Z" } }),
        ),
        ("revokeApiKey", json!({ "id": key_id })),
        (
            "addWebhookDestination",
            json!({ "input": {
            "endpointId": "contact", "url": "http://127.0.0.1:9/other", "maxInFlight": 5,
            "events": ["SUBMISSION_RECEIVED"], "maxRequestsPerSecond": 5,
            // One header, given as an object (GraphQL reads it as a list of one), so
            // that each of its fields can be set wrong on its own.
            "headers": { "name": "X-Tenant", "value": "acme", "secret": false },
            "auth": { "basic": { "username": "forms", "password": "pw" } },
            "retryPolicy": { "maxAttempts": 3, "firstWaitSeconds": 1, "maxWaitSeconds": 8 },
            "clientCertificate": { "certificate": client_certificate, "key": client_key },
            "clientCa": client_certificate,
        } }),
        ),
        (
            "addEmailDestination",
            json!({ "input": {
            "endpointId": "contact", "recipients": ["desk@example.com"], "replyToField": "email",
            "events": ["SUBMISSION_RECEIVED"], "maxRequestsPerSecond": 5,
            "retryPolicy": { "maxAttempts": 3, "firstWaitSeconds": 1, "maxWaitSeconds": 8 },
        } }),
        ),
        (
            "addAutoresponderDestination",
            json!({ "input": {
            "endpointId": "contact", "addressField": "email", "subject": "Thank you",
            "body": "We have your message.", "windowSeconds": 3600,
            "retryPolicy": { "maxAttempts": 3, "firstWaitSeconds": 1, "maxWaitSeconds": 8 },
        } }),
        ),
        (
            "updateDestination",
            json!({ "input": {
            "id": destination, "url": "http://127.0.0.1:9/hook", "maxInFlight": 5,
            "events": ["SUBMISSION_RECEIVED"], "maxRequestsPerSecond": 5,
            "headers": { "name": "X-Tenant", "value": "acme", "secret": false },
            "auth": { "basic": { "username": "forms", "password": "pw" } },
            "retryPolicy": { "maxAttempts": 3, "firstWaitSeconds": 1, "maxWaitSeconds": 8 },
            "clientCertificate": { "certificate": client_certificate, "key": client_key },
            "clientCa": client_certificate,
        } }),
        ),
        (
            "removeDestination",
            json!({ "id": destination, "cancelDeliveries": false }),
        ),
        ("pauseDestination", json!({ "id": destination })),
        ("resumeDestination", json!({ "id": destination })),
        (
            "rotateDestinationSecret",
            json!({ "id": destination, "overlapSeconds": 60 }),
        ),
        ("endDestinationSecretOverlap", json!({ "id": destination })),
        (
            "setSpamProtection",
            json!({ "input": {
            "endpointId": "contact",
            "captcha": { "provider": "RECAPTCHA_V3", "secret": "s3cret", "minScore": 0.5 },
            "whenVerifierUnreachable": "REFUSE", "maxLinks": 3, "blockedWords": ["casino"],
            "blockedPatterns": ["^buy"], "blockedSenders": ["spam.example"],
            "minFillSeconds": 3, "akismet": false,
        } }),
        ),
        ("removeSpamProtection", json!({ "endpointId": "contact" })),
        ("markSubmissionNotSpam", json!({ "id": submission })),
        ("markSubmissionSpam", json!({ "id": submission })),
    ]);

    // The bad value of every field of every mutation, by the path the client writes.
    let endpoint_fields = |mutation: &'static str| {
        vec![
            ((mutation, "name"), Bad(json!("   "))),
            ((mutation, "isActive"), Exempt(BOOLEAN)),
            (
                (mutation, "webhookUrl"),
                Bad(json!("ftp://hooks.example.com/x")),
            ),
            ((mutation, "redirectUrl"), Bad(json!("/thanks"))),
            (
                (mutation, "allowedOrigins"),
                Bad(json!(["https://site.example/path"])),
            ),
            ((mutation, "honeypotField"), Bad(json!("web site"))),
            ((mutation, "retentionDays"), Bad(json!(-1))),
            ((mutation, "spamRetentionDays"), Bad(json!(1_000_001))),
            ((mutation, "fileUploads.maxFiles"), Bad(json!(0))),
            ((mutation, "fileUploads.maxFileBytes"), Bad(json!(0))),
            ((mutation, "fileUploads.maxTotalBytes"), Bad(json!(1))),
            (
                (mutation, "fileUploads.allowedTypes"),
                Bad(json!(["application/x-msdownload"])),
            ),
        ]
    };
    let no_endpoint = || Refused(json!("no-such-endpoint"), "ENDPOINT_NOT_FOUND");
    let no_destination = || Refused(json!("dst_nothing"), "DESTINATION_NOT_FOUND");
    let no_submission = || Refused(json!("sub_nothing"), "SUBMISSION_NOT_FOUND");
    let mut cases: BTreeMap<(&str, &str), Case> = BTreeMap::new();
    cases.extend(endpoint_fields("createEndpoint"));
    cases.extend(endpoint_fields("updateEndpoint"));
    cases.extend([
        (
            ("createEndpoint", "id"),
            Refused(json!("Bad Id!"), "INVALID_ENDPOINT_ID"),
        ),
        (("updateEndpoint", "id"), no_endpoint()),
        (("rotateWebhookSecret", "endpointId"), no_endpoint()),
        (("rotateWebhookSecret", "overlapSeconds"), Bad(json!(-1))),
        (("endWebhookSecretOverlap", "endpointId"), no_endpoint()),
        (("pauseEndpoint", "endpointId"), no_endpoint()),
        (("resumeEndpoint", "endpointId"), no_endpoint()),
        (("deleteEndpoint", "id"), no_endpoint()),
        (("deleteEndpoint", "history"), Exempt(ENUM)),
        (("deleteEndpoint", "cancelDeliveries"), Exempt(BOOLEAN)),
        (
            ("replayDelivery", "id"),
            Refused(json!("whd_nothing"), "DELIVERY_NOT_FOUND"),
        ),
        (("replayDelivery", "destination"), Exempt(ENUM)),
        (("replayDeliveries", "filter.endpointId"), Exempt(FILTER_ID)),
        (
            ("replayDeliveries", "filter.destinationId"),
            Exempt(FILTER_ID),
        ),
        (
            ("replayDeliveries", "filter.failedAfter"),
            Refused(json!("2200-01-01T00:00:00Z"), "INVALID_TIME_RANGE"),
        ),
        (
            ("replayDeliveries", "filter.failedBefore"),
            Refused(json!("1900-01-01T00:00:00Z"), "INVALID_TIME_RANGE"),
        ),
        (
            ("replayDeliveries", "filter.createdAfter"),
            Refused(json!("2200-01-01T00:00:00Z"), "INVALID_TIME_RANGE"),
        ),
        (
            ("replayDeliveries", "filter.createdBefore"),
            Refused(json!("1900-01-01T00:00:00Z"), "INVALID_TIME_RANGE"),
        ),
        (("replayDeliveries", "dryRun"), Exempt(BOOLEAN)),
        (("replayDeliveries", "destination"), Exempt(ENUM)),
        (("deleteSubmission", "id"), no_submission()),
        (("erasePersonData", "value"), Bad(json!("@@"))),
        (
            ("createEndpoint", "projectId"),
            Refused(json!("prj_nothing"), "PROJECT_NOT_FOUND"),
        ),
        (("createProject", "name"), Bad(json!(" "))),
        (("renameProject", "name"), Bad(json!(""))),
        (
            ("renameProject", "id"),
            Refused(json!("prj_nothing"), "PROJECT_NOT_FOUND"),
        ),
        (
            ("deleteProject", "id"),
            Refused(json!("prj_nothing"), "PROJECT_NOT_FOUND"),
        ),
        (("createApiKey", "name"), Bad(json!(""))),
        (("createApiKey", "role"), Exempt(ENUM)),
        (
            ("createApiKey", "projectId"),
            Refused(json!("prj_nothing"), "PROJECT_NOT_FOUND"),
        ),
        (
            ("createApiKey", "expiresAt"),
            Bad(json!("2000-01-01T00:00:00Z")),
        ),
        (
            ("updateApiKey", "id"),
            Refused(json!("mk_nothing"), "KEY_NOT_FOUND"),
        ),
        (("updateApiKey", "name"), Bad(json!(" "))),
        (
            ("updateApiKey", "expiresAt"),
            Bad(json!("2000-01-01T00:00:00Z")),
        ),
        (
            ("revokeApiKey", "id"),
            Refused(json!("mk_nothing"), "KEY_NOT_FOUND"),
        ),
        (("addWebhookDestination", "endpointId"), no_endpoint()),
        (
            ("addWebhookDestination", "url"),
            Bad(json!("ftp://hooks.example.com/x")),
        ),
        (("addWebhookDestination", "maxInFlight"), Bad(json!(0))),
        (("addWebhookDestination", "events"), Bad(json!([]))),
        (
            ("addWebhookDestination", "maxRequestsPerSecond"),
            Bad(json!(0)),
        ),
        (
            ("addWebhookDestination", "headers.name"),
            Bad(json!("Content-Type")),
        ),
        (
            ("addWebhookDestination", "headers.value"),
            Bad(json!("a\r\nb")),
        ),
        (("addWebhookDestination", "headers.secret"), Exempt(BOOLEAN)),
        (
            ("addWebhookDestination", "signWithEd25519"),
            Exempt(BOOLEAN),
        ),
        (("addWebhookDestination", "format"), Exempt(ENUM)),
        (("addWebhookDestination", "ordered"), Exempt(BOOLEAN)),
        (("addEmailDestination", "ordered"), Exempt(BOOLEAN)),
        (
            ("addEmailDestination", "emailTemplate.subject"),
            Bad(json!("{{ values.x ")),
        ),
        (
            ("addEmailDestination", "emailTemplate.text"),
            Bad(json!("{% if %}")),
        ),
        (
            ("addWebhookDestination", "bodyTemplate"),
            Bad(json!("{{ values.x ")),
        ),
        (
            ("addWebhookDestination", "auth.basic.username"),
            Bad(json!("a:b")),
        ),
        (
            ("addWebhookDestination", "auth.basic.password"),
            Bad(json!("")),
        ),
        (
            ("addWebhookDestination", "auth.bearer.token"),
            Exempt(ONE_OF),
        ),
        (
            ("addWebhookDestination", "auth.oauth2.tokenUrl"),
            Exempt(ONE_OF),
        ),
        (
            ("addWebhookDestination", "auth.oauth2.clientId"),
            Exempt(ONE_OF),
        ),
        (
            ("addWebhookDestination", "auth.oauth2.clientSecret"),
            Exempt(ONE_OF),
        ),
        (
            ("addWebhookDestination", "auth.oauth2.scope"),
            Exempt(ONE_OF),
        ),
        (
            ("addWebhookDestination", "auth.oauth2.audience"),
            Exempt(ONE_OF),
        ),
        (
            ("addWebhookDestination", "clientCertificate.certificate"),
            Bad(json!("not pem")),
        ),
        (
            ("addWebhookDestination", "clientCertificate.key"),
            Bad(json!(other_key)),
        ),
        (("addWebhookDestination", "clientCa"), Bad(json!("not pem"))),
        (
            ("addWebhookDestination", "retryPolicy.maxAttempts"),
            Bad(json!(0)),
        ),
        (
            ("addWebhookDestination", "retryPolicy.firstWaitSeconds"),
            Bad(json!(0)),
        ),
        (
            ("addWebhookDestination", "retryPolicy.maxWaitSeconds"),
            Bad(json!(0.5)),
        ),
        (("addEmailDestination", "endpointId"), no_endpoint()),
        (
            ("addEmailDestination", "recipients"),
            Bad(json!(["not an address"])),
        ),
        (
            ("addEmailDestination", "replyToField"),
            Bad(json!("e mail")),
        ),
        (("addEmailDestination", "events"), Bad(json!([]))),
        (
            ("addEmailDestination", "maxRequestsPerSecond"),
            Bad(json!(0)),
        ),
        (
            ("addEmailDestination", "retryPolicy.maxAttempts"),
            Bad(json!(0)),
        ),
        (
            ("addEmailDestination", "retryPolicy.firstWaitSeconds"),
            Bad(json!(0)),
        ),
        (
            ("addEmailDestination", "retryPolicy.maxWaitSeconds"),
            Bad(json!(0.5)),
        ),
        (("addAutoresponderDestination", "endpointId"), no_endpoint()),
        (
            ("addAutoresponderDestination", "addressField"),
            Bad(json!("e mail")),
        ),
        (
            ("addAutoresponderDestination", "subject"),
            Bad(json!("two\nlines")),
        ),
        (("addAutoresponderDestination", "body"), Bad(json!(""))),
        (
            ("addAutoresponderDestination", "windowSeconds"),
            Bad(json!(1)),
        ),
        (
            ("addAutoresponderDestination", "retryPolicy.maxAttempts"),
            Bad(json!(0)),
        ),
        (
            (
                "addAutoresponderDestination",
                "retryPolicy.firstWaitSeconds",
            ),
            Bad(json!(0)),
        ),
        (
            ("addAutoresponderDestination", "retryPolicy.maxWaitSeconds"),
            Bad(json!(0.5)),
        ),
        (
            ("updateDestination", "headers.name"),
            Bad(json!("Content-Type")),
        ),
        (("updateDestination", "headers.value"), Bad(json!("a\r\nb"))),
        (("updateDestination", "headers.secret"), Exempt(BOOLEAN)),
        (("updateDestination", "signWithEd25519"), Exempt(BOOLEAN)),
        (("updateDestination", "format"), Exempt(ENUM)),
        (("updateDestination", "ordered"), Exempt(BOOLEAN)),
        (
            ("updateDestination", "emailTemplate.subject"),
            Refused(json!("{{ values.x "), "INVALID_INPUT"),
        ),
        (
            ("updateDestination", "emailTemplate.text"),
            Refused(json!("{% if %}"), "INVALID_INPUT"),
        ),
        (
            ("updateDestination", "bodyTemplate"),
            Bad(json!("{{ values.x ")),
        ),
        (
            ("updateDestination", "auth.basic.username"),
            Bad(json!("a:b")),
        ),
        (("updateDestination", "auth.basic.password"), Bad(json!(""))),
        (("updateDestination", "auth.bearer.token"), Exempt(ONE_OF)),
        (
            ("updateDestination", "auth.oauth2.tokenUrl"),
            Exempt(ONE_OF),
        ),
        (
            ("updateDestination", "auth.oauth2.clientId"),
            Exempt(ONE_OF),
        ),
        (
            ("updateDestination", "auth.oauth2.clientSecret"),
            Exempt(ONE_OF),
        ),
        (("updateDestination", "auth.oauth2.scope"), Exempt(ONE_OF)),
        (
            ("updateDestination", "auth.oauth2.audience"),
            Exempt(ONE_OF),
        ),
        (
            ("updateDestination", "clientCertificate.certificate"),
            Bad(json!("not pem")),
        ),
        (
            ("updateDestination", "clientCertificate.key"),
            Bad(json!(other_key)),
        ),
        (("updateDestination", "clientCa"), Bad(json!("not pem"))),
        (
            ("updateDestination", "retryPolicy.maxAttempts"),
            Bad(json!(0)),
        ),
        (
            ("updateDestination", "retryPolicy.firstWaitSeconds"),
            Bad(json!(0)),
        ),
        (
            ("updateDestination", "retryPolicy.maxWaitSeconds"),
            Bad(json!(0.5)),
        ),
        (("updateDestination", "id"), no_destination()),
        (
            ("updateDestination", "url"),
            Bad(json!("ftp://hooks.example.com/x")),
        ),
        (("updateDestination", "recipients"), Bad(json!([]))),
        (("updateDestination", "replyToField"), Bad(json!("e mail"))),
        (("updateDestination", "maxInFlight"), Bad(json!(0))),
        (("updateDestination", "events"), Bad(json!([]))),
        (("updateDestination", "maxRequestsPerSecond"), Bad(json!(0))),
        (("removeDestination", "id"), no_destination()),
        (("removeDestination", "cancelDeliveries"), Exempt(BOOLEAN)),
        (("pauseDestination", "id"), no_destination()),
        (("resumeDestination", "id"), no_destination()),
        (("rotateDestinationSecret", "id"), no_destination()),
        (
            ("rotateDestinationSecret", "overlapSeconds"),
            Bad(json!(-1)),
        ),
        (("endDestinationSecretOverlap", "id"), no_destination()),
        (("setSpamProtection", "endpointId"), no_endpoint()),
        (("setSpamProtection", "captcha.provider"), Exempt(ENUM)),
        (
            ("setSpamProtection", "captcha.secret"),
            Bad(json!("has spaces")),
        ),
        (("setSpamProtection", "captcha.minScore"), Bad(json!(1.5))),
        (
            ("setSpamProtection", "whenVerifierUnreachable"),
            Exempt(ENUM),
        ),
        (("setSpamProtection", "maxLinks"), Bad(json!(-1))),
        (("setSpamProtection", "blockedWords"), Bad(json!([""]))),
        (
            ("setSpamProtection", "blockedPatterns"),
            Bad(json!(["(unclosed"])),
        ),
        (
            ("setSpamProtection", "blockedSenders"),
            Bad(json!(["not an address"])),
        ),
        (("setSpamProtection", "minFillSeconds"), Bad(json!(0))),
        // A Boolean with a bad value: this server has no Akismet key.
        (("setSpamProtection", "akismet"), Bad(json!(true))),
        (("removeSpamProtection", "endpointId"), no_endpoint()),
        (("markSubmissionNotSpam", "id"), no_submission()),
        (("markSubmissionSpam", "id"), no_submission()),
    ]);

    let schema = app.gql(&key, INTROSPECTION, json!({})).await;
    let schema = &schema["data"]["__schema"];
    let input_types: BTreeMap<String, Vec<Value>> = schema["types"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|ty| ty["kind"] == "INPUT_OBJECT")
        .map(|ty| {
            let fields = ty["inputFields"].as_array().unwrap().clone();
            (ty["name"].as_str().unwrap().to_string(), fields)
        })
        .collect();
    let mutations = schema["mutationType"]["fields"].as_array().unwrap();
    assert!(mutations.len() >= 20, "{schema}");

    let mut uncovered = Vec::new();
    let mut wrong = Vec::new();
    let mut walked = BTreeSet::new();
    for mutation in mutations {
        let name = mutation["name"].as_str().unwrap();
        let args = mutation["args"].as_array().unwrap();
        let Some(valid) = valid.get(name) else {
            uncovered.push(format!("{name}: no valid arguments to start from"));
            continue;
        };
        let declarations: Vec<String> = args
            .iter()
            .map(|a| {
                format!(
                    "${}: {}",
                    a["name"].as_str().unwrap(),
                    type_text(&a["type"])
                )
            })
            .collect();
        let uses: Vec<String> = args
            .iter()
            .map(|a| format!("{0}: ${0}", a["name"].as_str().unwrap()))
            .collect();
        let document = format!(
            "mutation({}) {{ {name}({}) {{ __typename }} }}",
            declarations.join(", "),
            uses.join(", ")
        );
        for arg in args {
            let arg_name = arg["name"].as_str().unwrap();
            let mut inner = Vec::new();
            leaves(&input_types, &arg["type"], "", &mut inner);
            for inner in inner {
                let path = client_path(arg_name, &inner);
                walked.insert((name.to_string(), path.clone()));
                let Some(case) = cases.get(&(name, path.as_str())) else {
                    uncovered.push(format!("{name}: {path}"));
                    continue;
                };
                let (value, expected_code) = match case {
                    Exempt(reason) => {
                        assert!(!reason.is_empty(), "{name}: {path}: an exemption says why");
                        continue;
                    }
                    Bad(value) => (value, None),
                    Refused(value, code) => (value, Some(*code)),
                };
                let mut variables = valid.clone();
                let at = match inner.as_str() {
                    "" => arg_name.to_string(),
                    inner => format!("{arg_name}.{inner}"),
                };
                set_path(&mut variables, &at, value.clone());
                let answer = app.gql(&key, &document, variables).await;
                let error = &answer["errors"][0];
                let code = error["extensions"]["code"].as_str().unwrap_or("(none)");
                let field = &error["extensions"]["details"]["field"];
                let ok = match expected_code {
                    None => {
                        matches!(code, "INVALID_INPUT" | "INVALID_WEBHOOK_URL")
                            && field == &json!(path)
                    }
                    Some(expected) => {
                        code == expected && (field.is_null() || field == &json!(path))
                    }
                };
                if !ok || answer["data"][name].is_object() {
                    wrong.push(format!("{name}: {path} = {value}: {answer}"));
                }
            }
        }
    }
    let stale: Vec<String> = cases
        .keys()
        .filter(|(m, p)| !walked.contains(&(m.to_string(), p.to_string())))
        .map(|(m, p)| format!("{m}: {p}"))
        .collect();
    assert!(
        uncovered.is_empty(),
        "fields with neither a bad value nor an exemption in this test: {uncovered:#?}"
    );
    assert!(
        stale.is_empty(),
        "cases for fields the schema does not have: {stale:#?}"
    );
    assert!(
        wrong.is_empty(),
        "refusals that do not name the field sent:\n{}",
        wrong.join("\n")
    );
    // Nothing was changed by a refused mutation: the one endpoint, as created.
    let after = app
        .gql(
            &key,
            "{ endpoints { nodes { id name destinations { id url } spamProtection { maxLinks } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        after["data"]["endpoints"]["nodes"],
        json!([{ "id": "contact", "name": "Contact",
                  "destinations": [{ "id": destination, "url": "http://127.0.0.1:9/hook" }],
                  "spamProtection": null }]),
        "{after}"
    );
}
