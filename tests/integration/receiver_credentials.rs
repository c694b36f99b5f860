//! Receivers that want more than a fixed credential (docs/delivery.md, "OAuth2 client
//! credentials", "Client certificates (mTLS)"): a real token endpoint on loopback issuing
//! tokens, a receiver taking only the current one; TLS receivers on loopback that ask for
//! a client certificate from their own CA. Bad settings refused by name, nothing stored.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use hymical_forms::testing::clock::SystemClock;
use serde_json::{json, Value};

use support::harness::{data, serve_on_loopback, TestApp};

const DEV: &[(&str, &str)] = &[
    ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
    ("FORMS_RATE_LIMIT_ENABLED", "false"),
    ("FORMS_WEBHOOK_CONNECT_TIMEOUT_SECONDS", "1"),
    ("FORMS_WEBHOOK_READ_TIMEOUT_SECONDS", "1"),
];

const CLIENT_SECRET: &str = "cl1ent-s3cret-value";

/// A token endpoint and a receiver sharing a generation: the endpoint issues
/// `tok-{generation}` (to `forms-client` with the secret, client credentials, scope
/// `hooks`), the receiver takes only `Bearer tok-{generation}`. `hang`: the endpoint never
/// answers.
#[derive(Clone, Default)]
struct Issuer {
    generation: Arc<AtomicUsize>,
    token_requests: Arc<AtomicUsize>,
    received: Arc<AtomicUsize>,
    hang: bool,
}

impl Issuer {
    async fn start(hang: bool) -> (Issuer, String) {
        let issuer = Issuer {
            hang,
            ..Issuer::default()
        };
        let token = {
            let issuer = issuer.clone();
            move |headers: HeaderMap, body: String| async move {
                issuer.token_requests.fetch_add(1, Ordering::SeqCst);
                if issuer.hang {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                // base64("forms-client:cl1ent-s3cret-value")
                let basic = "Basic Zm9ybXMtY2xpZW50OmNsMWVudC1zM2NyZXQtdmFsdWU=";
                let client = headers.get("authorization").and_then(|v| v.to_str().ok());
                if client != Some(basic) || body != "grant_type=client_credentials&scope=hooks" {
                    return (
                        StatusCode::UNAUTHORIZED,
                        Json(json!({ "error": "invalid_client" })),
                    );
                }
                let generation = issuer.generation.load(Ordering::SeqCst);
                (
                    StatusCode::OK,
                    Json(json!({ "access_token": format!("tok-{generation}"),
                                 "token_type": "Bearer", "expires_in": 3600 })),
                )
            }
        };
        let hook = {
            let issuer = issuer.clone();
            move |headers: HeaderMap| async move {
                let generation = issuer.generation.load(Ordering::SeqCst);
                let wanted = format!("Bearer tok-{generation}");
                if headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&wanted) {
                    issuer.received.fetch_add(1, Ordering::SeqCst);
                    StatusCode::NO_CONTENT
                } else {
                    StatusCode::UNAUTHORIZED
                }
            }
        };
        let router = Router::new()
            .route("/token", post(token))
            .route("/hook", post(hook));
        let addr = serve_on_loopback(router).await;
        (issuer, format!("http://{addr}"))
    }
}

async fn setup(app: &TestApp) -> String {
    let (_, key) = app.create_key("credentials").await;
    app.create_contact_endpoint(&key).await;
    key
}

async fn add_webhook(app: &TestApp, key: &str, input: Value) -> Value {
    app.gql(
        key,
        "mutation($input: AddWebhookDestinationInput!) { addWebhookDestination(input: $input) { destination { id auth { kind username tokenUrl clientId scope audience } clientCertificate { fingerprintSha256 } hasClientCa } } }",
        json!({ "input": input }),
    )
    .await
}

fn oauth(base: &str) -> Value {
    json!({ "oauth2": { "tokenUrl": format!("{base}/token"), "clientId": "forms-client",
                        "clientSecret": CLIENT_SECRET, "scope": "hooks" } })
}

async fn delivered(app: &TestApp) -> i64 {
    app.db
        .count("SELECT count(*) AS n FROM webhook_deliveries WHERE state = 'delivered'")
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_is_fetched_once_reused_and_fetched_again_once_after_a_401() {
    let (issuer, base) = Issuer::start(false).await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let key = setup(&app).await;
    let added = data(
        add_webhook(
            &app,
            &key,
            json!({ "endpointId": "contact", "url": format!("{base}/hook"), "auth": oauth(&base) }),
        )
        .await,
    );
    assert_eq!(
        added["addWebhookDestination"]["destination"]["auth"],
        json!({ "kind": "OAUTH2", "username": null, "tokenUrl": format!("{base}/token"),
                "clientId": "forms-client", "scope": "hooks", "audience": null })
    );
    assert!(!added.to_string().contains(CLIENT_SECRET));

    for n in 0..3 {
        app.submit("contact", &format!("message=hello{n}")).await;
    }
    let worker = app.worker(None);
    assert_eq!(worker.run_once().await.unwrap(), 3);
    app.submit("contact", "message=later").await;
    assert_eq!(worker.run_once().await.unwrap(), 1);
    assert_eq!(delivered(&app).await, 4);
    assert_eq!(issuer.token_requests.load(Ordering::SeqCst), 1, "cached");

    // The receiver rotates: the old token is refused, the endpoint issues a new one.
    issuer.generation.fetch_add(1, Ordering::SeqCst);
    for n in 0..2 {
        app.submit("contact", &format!("message=rotated{n}")).await;
    }
    assert_eq!(worker.run_once().await.unwrap(), 2);
    assert_eq!(delivered(&app).await, 6, "delivered in the same attempt");
    assert_eq!(
        issuer.token_requests.load(Ordering::SeqCst),
        2,
        "exactly one fetch after the 401s"
    );
    assert_eq!(issuer.received.load(Ordering::SeqCst), 6);
    let stored = app
        .db
        .count("SELECT count(*) AS n FROM destinations d, delivery_attempts a WHERE d::text LIKE '%tok-%' OR a::text LIKE '%tok-%'")
        .await;
    assert_eq!(stored, 0, "no token is stored");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_token_endpoint_fails_the_attempt_as_a_network_error_and_it_is_retried() {
    let (issuer, base) = Issuer::start(true).await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let key = setup(&app).await;
    data(
        add_webhook(
            &app,
            &key,
            json!({ "endpointId": "contact", "url": format!("{base}/hook"), "auth": oauth(&base) }),
        )
        .await,
    );
    app.submit("contact", "message=hello").await;
    let started = Instant::now();
    assert_eq!(app.worker(None).run_once().await.unwrap(), 1);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(issuer.token_requests.load(Ordering::SeqCst), 1);
    assert_eq!(issuer.received.load(Ordering::SeqCst), 0);
    let failed = app
        .db
        .count("SELECT count(*) AS n FROM delivery_attempts WHERE outcome = 'network_error' AND error LIKE 'OAuth2 token endpoint:%'")
        .await;
    assert_eq!(failed, 1);
    let pending = app
        .db
        .count("SELECT count(*) AS n FROM webhook_deliveries WHERE state = 'pending'")
        .await;
    assert_eq!(pending, 1, "retried as a connection failure");
    let leaked = app
        .db
        .count(&format!("SELECT count(*) AS n FROM delivery_attempts a WHERE a::text LIKE '%tok-%' OR a::text LIKE '%{CLIENT_SECRET}%'"))
        .await;
    assert_eq!(leaked, 0);
}

/// A CA and what it issues, PEM.
struct Authority {
    certificate: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap().pem();
        Authority {
            certificate,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` and its key, PEM.
    fn issue(&self, names: &[&str]) -> (String, String) {
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = params.signed_by(&key, &self.issuer).unwrap();
        (certificate.pem(), key.serialize_pem())
    }
}

/// A TLS receiver on 127.0.0.1 whose certificate `server_ca` issued, taking only clients
/// with a certificate `client_ca` issued; counts the requests it answered 204.
async fn tls_receiver(server_ca: &Authority, client_ca: &Authority) -> (Arc<AtomicUsize>, String) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (certificate, key) = server_ca.issue(&["127.0.0.1"]);
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(client_ca.certificate.as_bytes()).unwrap())
        .unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(certificate.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(AtomicUsize::new(0));
    let counter = answered.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, counter) = (acceptor.clone(), counter.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |_request| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    async {
                        Ok::<_, Infallible>(
                            hyper::Response::builder()
                                .status(204)
                                .body(http_body_util::Empty::<bytes::Bytes>::new())
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (answered, format!("https://127.0.0.1:{}/hook", addr.port()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_asking_for_a_client_certificate_gets_the_right_one_only() {
    let server_ca = Authority::new("Receiver server CA");
    let client_ca = Authority::new("Receiver client CA");
    let stranger_ca = Authority::new("Another CA");
    let (answered, url) = tls_receiver(&server_ca, &client_ca).await;
    let app = TestApp::start_with(DEV, Arc::new(SystemClock)).await;
    let key = setup(&app).await;
    let (right_cert, right_key) = client_ca.issue(&["forms.example"]);
    let (wrong_cert, wrong_key) = stranger_ca.issue(&["forms.example"]);
    let mut ids = Vec::new();
    for identity in [
        Some((&right_cert, &right_key)),
        Some((&wrong_cert, &wrong_key)),
        None,
    ] {
        let mut input = json!({ "endpointId": "contact", "url": url,
                                "clientCa": server_ca.certificate });
        if let Some((certificate, key)) = identity {
            input["clientCertificate"] = json!({ "certificate": certificate, "key": key });
        }
        let added = data(add_webhook(&app, &key, input).await);
        let destination = &added["addWebhookDestination"]["destination"];
        assert_eq!(destination["hasClientCa"], true);
        assert_eq!(
            destination["clientCertificate"].is_null(),
            identity.is_none()
        );
        assert!(!added.to_string().contains("PRIVATE KEY"));
        ids.push(destination["id"].as_str().unwrap().to_string());
    }
    app.submit("contact", "message=hello").await;
    assert_eq!(app.worker(None).run_once().await.unwrap(), 3);
    assert_eq!(
        answered.load(Ordering::SeqCst),
        1,
        "the right certificate only"
    );
    let state = |id: &str| {
        format!("SELECT count(*) AS n FROM webhook_deliveries WHERE destination_id = '{id}' AND state = 'delivered'")
    };
    assert_eq!(app.db.count(&state(&ids[0])).await, 1);
    for id in &ids[1..] {
        assert_eq!(app.db.count(&state(id)).await, 0);
        let failed = app
            .db
            .count(&format!("SELECT count(*) AS n FROM delivery_attempts a JOIN webhook_deliveries w ON w.id = a.delivery_id WHERE w.destination_id = '{id}' AND w.state = 'pending' AND a.outcome = 'network_error'"))
            .await;
        assert_eq!(failed, 1, "a TLS failure, retried");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_credentials_are_refused_by_name_and_nothing_is_stored() {
    let authority = Authority::new("A CA");
    let (certificate, key_pem) = authority.issue(&["forms.example"]);
    let (_, other_key) = authority.issue(&["other.example"]);
    // Without FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS: a token URL on loopback is refused.
    let app = TestApp::start_with(
        &[("FORMS_RATE_LIMIT_ENABLED", "false")],
        Arc::new(SystemClock),
    )
    .await;
    let key = setup(&app).await;
    let oauth2 = |token_url: &str, client_id: &str, secret: &str| json!({ "oauth2": { "tokenUrl": token_url, "clientId": client_id, "clientSecret": secret } });
    let good_url = "https://auth.example.com/token";
    let refused = [
        (
            json!({ "auth": oauth2("http://127.0.0.1:9/token", "id", "s") }),
            "auth.oauth2.tokenUrl",
        ),
        (
            json!({ "auth": oauth2("http://10.0.0.1/token", "id", "s") }),
            "auth.oauth2.tokenUrl",
        ),
        (
            json!({ "auth": oauth2("ftp://auth.example.com/", "id", "s") }),
            "auth.oauth2.tokenUrl",
        ),
        (
            json!({ "auth": oauth2(good_url, "id\r\nX-Injected: 1", "s") }),
            "auth.oauth2.clientId",
        ),
        (
            json!({ "auth": oauth2(good_url, "", "s") }),
            "auth.oauth2.clientId",
        ),
        (
            json!({ "auth": oauth2(good_url, "id", "") }),
            "auth.oauth2.clientSecret",
        ),
        (
            json!({ "auth": { "oauth2": { "tokenUrl": good_url, "clientId": "id", "clientSecret": "s", "scope": "a\"b" } } }),
            "auth.oauth2.scope",
        ),
        (
            json!({ "auth": { "oauth2": { "tokenUrl": good_url, "clientId": "id", "clientSecret": "s", "audience": "a\nb" } } }),
            "auth.oauth2.audience",
        ),
        (
            json!({ "clientCertificate": { "certificate": "not pem", "key": key_pem } }),
            "clientCertificate.certificate",
        ),
        (
            json!({ "clientCertificate": { "certificate": certificate, "key": "not pem" } }),
            "clientCertificate.key",
        ),
        (
            json!({ "clientCertificate": { "certificate": certificate, "key": other_key } }),
            "clientCertificate.key",
        ),
        (
            json!({ "clientCa": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" }),
            "clientCa",
        ),
        (json!({ "clientCa": "" }), "clientCa"),
    ];
    for (extra, field) in refused {
        let mut input = json!({ "endpointId": "contact", "url": "https://hooks.example.com/x" });
        for (name, value) in extra.as_object().unwrap() {
            input[name] = value.clone();
        }
        let answer = add_webhook(&app, &key, input).await;
        let error = &answer["errors"][0];
        assert_eq!(
            error["extensions"]["code"], "INVALID_INPUT",
            "{extra}: {answer}"
        );
        assert_eq!(
            error["extensions"]["details"]["field"], field,
            "{extra}: {answer}"
        );
        assert!(!answer.to_string().contains("PRIVATE KEY"), "{answer}");
    }
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM destinations").await,
        0
    );

    // Set, then cleared; a refused change leaves it as it was.
    let added = data(
        add_webhook(
            &app,
            &key,
            json!({ "endpointId": "contact", "url": "https://hooks.example.com/x",
                    "clientCertificate": { "certificate": certificate, "key": key_pem } }),
        )
        .await,
    );
    let id = added["addWebhookDestination"]["destination"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let change = |input: Value| {
        let app = &app;
        let key = key.clone();
        async move {
            app.gql(
                &key,
                "mutation($input: UpdateDestinationInput!) { updateDestination(input: $input) { destination { clientCertificate { fingerprintSha256 } hasClientCa } } }",
                json!({ "input": input }),
            )
            .await
        }
    };
    let refused = change(
        json!({ "id": id, "clientCertificate": { "certificate": certificate, "key": other_key } }),
    )
    .await;
    assert_eq!(
        refused["errors"][0]["extensions"]["details"]["field"], "clientCertificate.key",
        "{refused}"
    );
    assert_eq!(
        app.db
            .count(&format!(
                "SELECT count(*) AS n FROM destinations WHERE client_key = '{}'",
                key_pem.trim()
            ))
            .await,
        1
    );
    let cleared = data(change(json!({ "id": id, "clientCertificate": null })).await);
    assert_eq!(
        cleared["updateDestination"]["destination"]["clientCertificate"],
        Value::Null
    );
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM destinations WHERE client_certificate IS NULL AND client_key IS NULL").await,
        1
    );
}
