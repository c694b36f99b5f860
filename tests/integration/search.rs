//! Searching submissions: full text over the values, one exact value, with the endpoint,
//! folder and time filters; in the API and the export; bad searches refused by name.

use std::time::{Duration, Instant};

use diesel_async::SimpleAsyncConnection;
use serde_json::{json, Value};

use support::harness::{TestApp, TestDb};

const SEARCH: &str =
    "query($filter: SubmissionFilter) { submissions(filter: $filter, first: 50) { nodes { id } } }";

async fn found(app: &TestApp, key: &str, filter: Value) -> Vec<String> {
    let answer = app.gql(key, SEARCH, json!({ "filter": filter })).await;
    assert!(answer.get("errors").is_none(), "{filter}: {answer}");
    answer["data"]["submissions"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node["id"].as_str().unwrap().to_string())
        .collect()
}

/// Words and values find exactly the submissions holding them, across endpoints or in
/// one, in a folder, and the export takes the same filters; the statements read the
/// search index (sequential scans are switched off for the service's connections, so a
/// search that could not use it would still run, but the index's scan count says it was
/// used). Operators, quotes and odd characters are words, never an error; a search of
/// exclusions alone, 10,000 characters or a control character is refused by name.
#[tokio::test(flavor = "multi_thread")]
async fn words_and_values_find_their_submissions_through_the_index() {
    let db = TestDb::new().await;
    db.connect()
        .await
        .batch_execute(&format!(
            "ALTER DATABASE {} SET enable_seqscan = off",
            db.name
        ))
        .await
        .unwrap();
    let app = TestApp::start_on(
        db.clone(),
        &[("FORMS_RATE_LIMIT_ENABLED", "false")],
        std::sync::Arc::new(hymical_forms::testing::clock::SystemClock),
    )
    .await;
    let (_, key) = app.create_key("search").await;
    app.create_contact_endpoint(&key).await;
    let other = "mutation { createEndpoint(input: { id: \"other\", name: \"Other\" }) { endpoint { id } } }";
    app.gql(&key, other, json!({})).await;
    let lovelace = app
        .submit(
            "contact",
            "name=Ada+Lovelace&email=ada%40example.com&message=Notes+on+the+Analytical+Engine",
        )
        .await;
    let hopper = app
        .submit(
            "contact",
            "name=Grace+Hopper&email=grace%40example.org&message=A+COBOL+compiler",
        )
        .await;
    let elsewhere = app
        .submit("other", "name=Ada&email=+ADA%40Example.com+&message=hello")
        .await;
    let sorted = |mut ids: Vec<String>| {
        ids.sort();
        ids
    };

    assert_eq!(
        found(&app, &key, json!({"search": "lovelace"})).await,
        [lovelace.clone()]
    );
    assert_eq!(
        sorted(found(&app, &key, json!({"search": "ADA"})).await),
        sorted(vec![lovelace.clone(), elsewhere.clone()])
    );
    assert_eq!(
        found(&app, &key, json!({"search": "ada", "endpointId": "other"})).await,
        [elsewhere.clone()]
    );
    assert_eq!(
        found(&app, &key, json!({"search": "\"analytical engine\""})).await,
        [lovelace.clone()]
    );
    assert!(
        found(&app, &key, json!({"search": "\"engine analytical\""}))
            .await
            .is_empty()
    );
    assert!(found(&app, &key, json!({"search": "engine -analytical"}))
        .await
        .is_empty());
    assert_eq!(
        sorted(found(&app, &key, json!({"search": "cobol or lovelace"})).await),
        sorted(vec![lovelace.clone(), hopper.clone()])
    );
    assert!(
        found(&app, &key, json!({"search": "ada", "folder": "SPAM"}))
            .await
            .is_empty()
    );
    assert!(found(
        &app,
        &key,
        json!({"search": "ada", "receivedBefore": "2020-01-01T00:00:00Z"})
    )
    .await
    .is_empty());
    // A field's name is not its value.
    assert!(found(&app, &key, json!({"search": "message"}))
        .await
        .is_empty());
    // Operators of tsquery and odd characters are only text here.
    for odd in [
        "ada & | ! ( ) :* <->",
        "'ada'",
        "ada\\",
        "\"ada",
        "ada''; DROP TABLE submissions; --",
    ] {
        found(&app, &key, json!({"search": odd})).await;
    }

    // One value, whole, letter case and spaces aside: one person's submissions.
    assert_eq!(
        sorted(
            found(
                &app,
                &key,
                json!({"value": "Ada@example.COM", "folder": "ALL"})
            )
            .await
        ),
        sorted(vec![lovelace.clone(), elsewhere.clone()])
    );
    assert!(found(&app, &key, json!({"value": "example.com"}))
        .await
        .is_empty());
    assert!(found(&app, &key, json!({"value": "Ada Lovelace Notes"}))
        .await
        .is_empty());
    assert_eq!(
        found(&app, &key, json!({"value": "ada lovelace"})).await,
        [lovelace.clone()]
    );

    // The export takes the same filters.
    let exported = app
        .http
        .get(app.url("/submissions/export?format=json&search=lovelace"))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(exported.status(), 200);
    let body = exported.text().await.unwrap();
    assert!(
        body.contains(&lovelace) && !body.contains(&hopper),
        "{body}"
    );
    let refused = app
        .http
        .get(app.url("/submissions/export?format=json&value=%40%40"))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let refused: Value = refused.json().await.unwrap();
    assert!(refused.to_string().contains("value"), "{refused}");

    // Refused by name, never a 500.
    let long = "a".repeat(10_000);
    for (filter, field) in [
        (json!({"search": "-ada"}), "filter.search"),
        (json!({"search": "-\"ada lovelace\""}), "filter.search"),
        (json!({"search": long}), "filter.search"),
        (json!({"search": "ada\u{0}"}), "filter.search"),
        (json!({"search": "   "}), "filter.search"),
        (json!({"value": "!!!"}), "filter.value"),
        (json!({"value": "a\nb"}), "filter.value"),
    ] {
        let answer = app.gql(&key, SEARCH, json!({ "filter": filter })).await;
        assert_eq!(
            answer["errors"][0]["extensions"]["code"], "INVALID_INPUT",
            "{answer}"
        );
        assert_eq!(
            answer["errors"][0]["extensions"]["details"]["field"], field,
            "{answer}"
        );
    }

    // The searches read submissions_search_idx.
    let scans = "SELECT coalesce(sum(idx_scan), 0)::bigint AS n FROM pg_stat_user_indexes WHERE indexrelname = 'submissions_search_idx'";
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.db.count(scans).await == 0 {
        assert!(Instant::now() < deadline, "the search index was never read");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
