//! Searching submissions: full text over the values, one exact value, with the endpoint,
//! folder and time filters; in the API and the export; bad searches refused by name.

use std::time::{Duration, Instant};

use diesel_async::SimpleAsyncConnection;
use serde_json::{json, Value};

use support::harness::{assert_invalid_input, TestApp, TestDb};

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
        vec![lovelace.clone()]
    );
    assert_eq!(
        sorted(found(&app, &key, json!({"search": "ADA"})).await),
        sorted(vec![lovelace.clone(), elsewhere.clone()])
    );
    assert_eq!(
        found(&app, &key, json!({"search": "ada", "endpointId": "other"})).await,
        vec![elsewhere.clone()]
    );
    assert_eq!(
        found(&app, &key, json!({"search": "\"analytical engine\""})).await,
        vec![lovelace.clone()]
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
        vec![lovelace.clone()]
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
        assert_invalid_input(&answer, field);
    }

    // The searches read submissions_search_idx.
    let scans = "SELECT coalesce(sum(idx_scan), 0)::bigint AS n FROM pg_stat_user_indexes WHERE indexrelname = 'submissions_search_idx'";
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.db.count(scans).await == 0 {
        assert!(Instant::now() < deadline, "the search index was never read");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

const ERASE: &str =
    "mutation($value: String!) { erasePersonData(value: $value) { erasedSubmissionIds } }";

/// One person's data erased by their address: refused while one of their deliveries is
/// owed (nothing erased), then every submission holding it, in any letter case, in the
/// spam folder too and on another endpoint, goes in one operation, with what a mail
/// server's answer recorded of them; afterwards no row of any table holds the address,
/// another person's submission stays, and a second erase finds nothing. Bad values are
/// refused by name.
#[tokio::test(flavor = "multi_thread")]
async fn erasing_a_persons_data_leaves_nothing_of_them_in_any_table() {
    let receiver = support::receiver::Receiver::start().await;
    let app = TestApp::start_with(
        &[
            ("FORMS_ALLOW_PRIVATE_WEBHOOK_TARGETS", "true"),
            ("FORMS_RATE_LIMIT_ENABLED", "false"),
        ],
        std::sync::Arc::new(hymical_forms::testing::clock::SystemClock),
    )
    .await;
    let (_, key) = app.create_key("erase").await;
    let create = "mutation($input: CreateEndpointInput!) { createEndpoint(input: $input) { endpoint { id } } }";
    for (id, hook) in [("contact", Some(receiver.url("/hook"))), ("other", None)] {
        let answer = app
            .gql(
                &key,
                create,
                json!({"input": {"id": id, "name": id, "webhookUrl": hook}}),
            )
            .await;
        assert!(answer.get("errors").is_none(), "{answer}");
    }
    let address = "ada@example.com";
    let first = app
        .submit("contact", "name=Ada&email=ada%40example.com&message=hello")
        .await;
    let second = app
        .submit("other", "name=Ada&email=+ADA%40Example.COM&message=again")
        .await;
    let grace = app
        .submit(
            "contact",
            "name=Grace&email=grace%40example.org&message=ada%40example.com+is+my+friend",
        )
        .await;
    let mut conn = app.db.connect().await;
    // The second as spam; an attempt whose answer names the address, as a mail server's
    // refusal would.
    conn.batch_execute(&format!(
        "UPDATE submissions SET spam = true WHERE id = '{second}'"
    ))
    .await
    .unwrap();

    // What is held about them, before: both submissions, with their delivery history.
    let held = app
        .gql(
            &key,
            "query($value: String!) { personData(value: $value) { id fields { name values } files { id } deliveries { state attemptHistory { number } } } }",
            json!({ "value": address }),
        )
        .await;
    assert!(held.get("errors").is_none(), "{held}");
    assert_eq!(
        held["data"]["personData"].as_array().unwrap().len(),
        2,
        "{held}"
    );
    let refused = app.gql(&key, ERASE, json!({ "value": address })).await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "SUBMISSION_DELIVERY_IN_PROGRESS",
        "{refused}"
    );
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM submissions").await,
        3
    );

    assert_eq!(app.worker(None).run_once().await.unwrap(), 2);
    conn.batch_execute(&format!(
        "UPDATE delivery_attempts SET reply = '550 <{address}> no such user', error = 'refused {address}' WHERE submission_id = '{first}'"
    ))
    .await
    .unwrap();
    let erased = app
        .gql(&key, ERASE, json!({ "value": " Ada@Example.com " }))
        .await;
    assert!(erased.get("errors").is_none(), "{erased}");
    let mut ids: Vec<String> = erased["data"]["erasePersonData"]["erasedSubmissionIds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect();
    ids.sort();
    let mut expected = vec![first.clone(), second.clone()];
    expected.sort();
    assert_eq!(ids, expected);
    // The erasure is on record: what was erased (the submissions), never the value.
    let trail = app
        .gql(
            &key,
            "{ auditEntries(first: 5) { nodes { operation keyName targets changes } } }",
            json!({}),
        )
        .await;
    let entry = trail["data"]["auditEntries"]["nodes"][0].clone();
    assert_eq!(entry["operation"], "erasePersonData", "{trail}");
    assert_eq!(entry["keyName"], "erase");
    let mut targets: Vec<String> = serde_json::from_value(entry["targets"].clone()).unwrap();
    targets.sort();
    assert_eq!(targets, expected);
    assert_eq!(entry["changes"], json!({ "value": "[redacted]" }));

    // No row of any table holds the address but Grace's submission, which names it in
    // a message and is hers.
    let tables: Vec<String> = {
        #[derive(diesel::QueryableByName)]
        struct Table {
            #[diesel(sql_type = diesel::sql_types::Text)]
            name: String,
        }
        use diesel_async::RunQueryDsl;
        diesel::sql_query(
            "SELECT c.relname::text AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition",
        )
        .load::<Table>(&mut conn)
        .await
        .unwrap()
        .into_iter()
        .map(|table| table.name)
        .collect()
    };
    assert!(tables.len() > 10, "{tables:?}");
    for table in &tables {
        let holding = app
            .db
            .count(&format!(
                "SELECT count(*) AS n FROM {table} t WHERE t::text ILIKE '%{address}%'"
            ))
            .await;
        let expected = if table == "submissions" { 1 } else { 0 };
        assert_eq!(holding, expected, "{table} still holds the address");
    }
    for erased in [&first, &second] {
        for table in ["submissions", "autoresponder_recipients"] {
            let column = if table == "submissions" {
                "id"
            } else {
                "submission_id"
            };
            let left = format!("SELECT count(*) AS n FROM {table} WHERE {column} = '{erased}'");
            assert_eq!(app.db.count(&left).await, 0, "{table}");
        }
    }
    let kept = format!("SELECT count(*) AS n FROM submissions WHERE id = '{grace}'");
    assert_eq!(app.db.count(&kept).await, 1);
    // The history stays, without them.
    assert_eq!(
        app.db
            .count("SELECT count(*) AS n FROM webhook_deliveries WHERE submission_id IS NULL")
            .await,
        1
    );

    let again = app.gql(&key, ERASE, json!({ "value": address })).await;
    assert_eq!(
        again["errors"][0]["extensions"]["code"], "NO_SUBMISSION_HOLDS_VALUE",
        "{again}"
    );
    assert!(
        !again.to_string().contains(address),
        "the value is not echoed: {again}"
    );
    // Nor does the export hold it: Grace's submission, in which it is a word of hers.
    let export = app
        .http
        .get(app.url("/submissions/export?format=json&folder=all"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(export.status(), 200);
    let exported = export.text().await.unwrap();
    assert_eq!(
        exported
            .to_lowercase()
            .matches(&address.to_lowercase())
            .count(),
        1,
        "{exported}"
    );
    // A value 10,001 submissions hold is not one person's: refused, nothing erased.
    conn.batch_execute(
        "INSERT INTO submissions (id, endpoint_id, received_at, fields)
         SELECT 'sub_' || lpad(to_hex(n), 32, '0'), 'other', now(), '{\"answer\": [\"yes\"]}'
         FROM generate_series(1, 10001) AS n",
    )
    .await
    .unwrap();
    let common = app.gql(&key, ERASE, json!({ "value": "YES" })).await;
    assert_invalid_input(&common, "value");
    let person = "query($value: String!) { personData(value: $value) { id } }";
    let common = app.gql(&key, person, json!({ "value": "yes" })).await;
    assert_invalid_input(&common, "value");
    assert_eq!(
        app.db.count("SELECT count(*) AS n FROM submissions").await,
        10_002
    );
    for bad in ["@@", "", "a\u{0}b"] {
        let refused = app.gql(&key, ERASE, json!({ "value": bad })).await;
        assert_invalid_input(&refused, "value");
    }
}
