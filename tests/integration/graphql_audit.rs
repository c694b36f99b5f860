//! The external conformance check: graphql-http's `auditServer` (npm) against the running
//! server, the management key injected through its `fetchFn`. Any failed MUST fails here.

use std::process::Command;
use std::sync::Arc;

use hymical_forms::testing::clock::SystemClock;

use support::harness::TestApp;

#[tokio::test(flavor = "multi_thread")]
async fn graphql_http_audit_passes_every_must() {
    let dir = support::harness::npm_installed("graphql-audit", &["graphql-http"]);
    let app = TestApp::start_with(&[], Arc::new(SystemClock)).await;
    let (_, key) = app.create_key("audit").await;
    let url = app.url("/graphql");
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg("audit.mjs")
            .env("GRAPHQL_URL", url)
            .env("GRAPHQL_KEY", key)
            .current_dir(&dir)
            .output()
            .expect("node is needed for the GraphQL conformance audit")
    })
    .await
    .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    println!("{report}");
    assert!(
        output.status.success(),
        "a MUST audit failed:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report.lines().any(|l| l.starts_with("audit: ")), "{report}");
    assert!(!report.lines().any(|l| l.starts_with("error")), "{report}");
}
