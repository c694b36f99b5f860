//! A Hymical Forms webhook receiver: verifies the signature over the raw bytes, then
//! processes each submission once, however many times it is delivered.
//!
//! ```sh
//! WEBHOOK_SECRET=whsec_... PORT=9000 cargo run --example receiver
//! ```
//!
//! axum, hmac, sha2 and hex. Each request is reported as one JSON line on standard output.
//! A real receiver keeps the processed ids in its database, in the transaction that does
//! the work; a set in memory shows the rule.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac};
use sha2::Sha256;

#[derive(Clone)]
struct Receiver {
    secret: Arc<String>,
    processed: Arc<Mutex<HashSet<String>>>,
}

/// Whether `header` is `v1=<hex HMAC-SHA256 of raw_body>` under `secret` (compared in
/// constant time by `verify_slice`).
fn verify(secret: &str, raw_body: &[u8], header: &str) -> bool {
    let Some(hex_digest) = header.strip_prefix("v1=") else {
        return false;
    };
    let Ok(digest) = hex::decode(hex_digest) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return false;
    };
    mac.update(raw_body);
    mac.verify_slice(&digest).is_ok()
}

fn report(event: serde_json::Value) {
    println!("{event}");
}

async fn receive(
    State(receiver): State<Receiver>,
    headers: HeaderMap,
    raw_body: Bytes,
) -> StatusCode {
    let signature = headers
        .get("hymical-signature")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if !verify(&receiver.secret, &raw_body, signature) {
        report(serde_json::json!({ "event": "rejected" }));
        return StatusCode::UNAUTHORIZED;
    }
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(&raw_body) else {
        return StatusCode::BAD_REQUEST;
    };
    let submission = &body["submission"];
    let Some(id) = submission["id"].as_str() else {
        return StatusCode::BAD_REQUEST;
    };
    let first_time = match receiver.processed.lock() {
        Ok(mut processed) => processed.insert(id.to_string()),
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR,
    };
    if first_time {
        // The work: here, only a report of what arrived.
        report(
            serde_json::json!({ "event": "processed", "submission_id": id, "fields": submission["fields"] }),
        );
    } else {
        report(serde_json::json!({ "event": "duplicate", "submission_id": id }));
    }
    StatusCode::OK
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secret = std::env::var("WEBHOOK_SECRET")?;
    let port: u16 = std::env::var("PORT")
        .unwrap_or_else(|_| "9000".into())
        .parse()?;
    let receiver = Receiver {
        secret: Arc::new(secret),
        processed: Arc::default(),
    };
    let app = Router::new()
        .route("/", post(receive))
        .route("/{*path}", post(receive))
        .with_state(receiver);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
