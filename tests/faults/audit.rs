//! The audit trail under a crash: mutations sent to two serving processes at once, one of
//! them killed (SIGKILL) while requests are in flight. Every change that committed has its
//! entry, and no entry names a change that did not commit: the entry is written in the
//! change's own transaction.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use diesel::{BoolExpressionMethods, ExpressionMethods, QueryDsl, TextExpressionMethods};
use diesel_async::RunQueryDsl;
use serde_json::{json, Value};

use support::harness::{wait_for_status, ServeProcess, TestDb};

const SERVER: &[(&str, &str)] = &[("FORMS_RATE_LIMIT_ENABLED", "false")];

/// Creates endpoints `e-{process}-{n}` through `url` until `stop`, or `limit` of them;
/// returns the ids the server answered as created.
async fn create_endpoints(
    url: String,
    key: String,
    process: usize,
    limit: usize,
    stop: tokio_util::sync::CancellationToken,
) -> BTreeSet<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut answered = BTreeSet::new();
    for n in 0..limit {
        if stop.is_cancelled() {
            break;
        }
        let id = format!("e-{process}-{n}");
        let query = format!(
            r#"mutation {{ createEndpoint(input: {{ id: "{id}", name: "E {n}" }}) {{ endpoint {{ id }} }} }}"#
        );
        let sent = client
            .post(&url)
            .header("authorization", format!("Bearer {key}"))
            .json(&json!({ "query": query }))
            .send()
            .await;
        let Ok(response) = sent else {
            // The process is gone: whatever it committed is in the database.
            break;
        };
        let Ok(body) = response.json::<Value>().await else {
            break;
        };
        if body["data"]["createEndpoint"]["endpoint"]["id"] == id.as_str() {
            answered.insert(id);
        }
    }
    answered
}

#[tokio::test(flavor = "multi_thread")]
async fn every_committed_change_has_its_entry_and_no_entry_outlives_its_change() {
    let per_process = if crate::long() { 2_000 } else { 300 };
    let db = TestDb::new().await;
    let key = db.insert_admin_key("audited").await;
    let survivor = ServeProcess::start(&db, SERVER);
    let victim = ServeProcess::start(&db, SERVER);
    wait_for_status(&survivor.url("/ready"), 200).await;
    wait_for_status(&victim.url("/ready"), 200).await;

    let stop = tokio_util::sync::CancellationToken::new();
    let writers: Vec<_> = [&survivor, &victim]
        .iter()
        .enumerate()
        .flat_map(|(process, server)| {
            // Two clients per process, so that requests are in flight when the kill lands.
            (0..2).map(move |client| (process * 2 + client, server.url("/graphql")))
        })
        .map(|(writer, url)| {
            tokio::spawn(create_endpoints(
                url,
                key.clone(),
                writer,
                per_process / 2,
                stop.clone(),
            ))
        })
        .collect();
    // Kill the second process once it has committed some of its changes.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let committed: i64 = {
            use hymical_forms::testing::db::schema::endpoints::dsl::*;
            let mut conn = db.connect().await;
            endpoints
                .filter(id.like("e-2-%").or(id.like("e-3-%")))
                .count()
                .get_result(&mut conn)
                .await
                .unwrap()
        };
        if committed >= 20 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    victim.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    let mut answered = BTreeSet::new();
    for writer in writers {
        answered.extend(writer.await.unwrap());
    }

    let mut conn = db.connect().await;
    let endpoints: BTreeSet<String> = {
        use hymical_forms::testing::db::schema::endpoints::dsl::*;
        endpoints
            .select(id)
            .load::<String>(&mut conn)
            .await
            .unwrap()
            .into_iter()
            .collect()
    };
    let entries: Vec<(String, Vec<Option<String>>, String)> = {
        use hymical_forms::testing::db::schema::audit_entries::dsl::*;
        audit_entries
            .filter(operation.eq("createEndpoint"))
            .select((operation, targets, key_name))
            .load(&mut conn)
            .await
            .unwrap()
    };
    let audited: BTreeSet<String> = entries
        .iter()
        .flat_map(|(_, targets, _)| targets.iter().flatten().cloned())
        .collect();
    assert_eq!(entries.len(), audited.len(), "one entry per change");
    assert!(entries.iter().all(|(_, _, name)| name == "audited"));
    // Both ways: every committed endpoint has its entry, every entry its endpoint.
    assert_eq!(audited, endpoints, "committed changes and entries differ");
    // Every change a client was told of committed; the victim's in-flight ones may or
    // may not have, and either way they are in both sets or in neither.
    assert!(answered.is_subset(&endpoints));
    assert!(
        endpoints
            .iter()
            .any(|id| id.starts_with("e-2-") || id.starts_with("e-3-")),
        "the killed process committed nothing"
    );
    let (status, log) = survivor.stop();
    assert!(status.success(), "{log}");
}
