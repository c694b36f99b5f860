//! Migrations apply, revert and re-apply; every CHECK and UNIQUE constraint refuses what it
//! should.

use diesel::sql_types::Text;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use hymical_forms::testing::db::migrations;

use support::harness::TestDb;

#[derive(diesel::QueryableByName, Debug, PartialEq)]
struct Name {
    #[diesel(sql_type = Text)]
    name: String,
}

async fn tables(conn: &mut AsyncPgConnection) -> Vec<String> {
    let rows: Vec<Name> = diesel::sql_query(
        "SELECT table_name::text AS name FROM information_schema.tables
         WHERE table_schema = 'public' AND table_name NOT LIKE '\\_\\_%' ORDER BY 1",
    )
    .load(conn)
    .await
    .expect("list tables");
    rows.into_iter().map(|r| r.name).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_migration_applies_reverts_and_reapplies() {
    let db = TestDb::empty().await;
    let mut conn = db.connect().await;
    assert!(tables(&mut conn).await.is_empty());
    let status = migrations::status(&db.url).await.unwrap();
    assert!(!status.is_empty() && status.iter().all(|m| !m.applied));

    let applied = migrations::run_pending(&db.url).await.unwrap();
    assert_eq!(applied.len(), status.len());
    let after_up = tables(&mut conn).await;
    for table in [
        "delivery_attempts",
        "delivery_state_counts",
        "endpoints",
        "management_api_keys",
        "rate_limit_counters",
        "submissions",
        "webhook_deliveries",
    ] {
        assert!(
            after_up.contains(&table.to_string()),
            "{table} missing: {after_up:?}"
        );
    }
    assert!(migrations::pending(&db.url).await.unwrap().is_empty());
    assert!(
        migrations::run_pending(&db.url).await.unwrap().is_empty(),
        "second run applies nothing"
    );

    let reverted = migrations::revert_all(&db.url).await.unwrap();
    assert_eq!(reverted, status.len());
    assert!(
        tables(&mut conn).await.is_empty(),
        "down.sql leaves nothing behind"
    );

    migrations::run_pending(&db.url).await.unwrap();
    assert_eq!(tables(&mut conn).await, after_up);
}

/// Runs `sql` and expects it refused by `constraint`.
async fn refused(conn: &mut AsyncPgConnection, sql: &str, constraint: &str) {
    let error = diesel::sql_query(sql)
        .execute(conn)
        .await
        .expect_err(&format!("{constraint} should refuse: {sql}"));
    match &error {
        diesel::result::Error::DatabaseError(_, info) => {
            assert_eq!(info.constraint_name(), Some(constraint), "{sql}: {error}")
        }
        other => panic!("{sql}: unexpected error {other}"),
    }
}

async fn accepted(conn: &mut AsyncPgConnection, sql: &str) {
    diesel::sql_query(sql)
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

const HEX32: &str = "0123456789abcdef0123456789abcdef";

#[tokio::test(flavor = "multi_thread")]
async fn every_check_and_unique_constraint_refuses() {
    let db = TestDb::new().await;
    let c = &mut db.connect().await;
    let secret = format!("whsec_{HEX32}{HEX32}");

    // endpoints
    accepted(c, &format!("INSERT INTO endpoints (id, name, webhook_url, webhook_secret) VALUES ('contact', 'Contact', 'https://example.com/h', '{secret}')")).await;
    refused(
        c,
        "INSERT INTO endpoints (id, name) VALUES ('contact', 'Again')",
        "endpoints_pkey",
    )
    .await;
    refused(
        c,
        "INSERT INTO endpoints (id, name) VALUES ('-bad', 'x')",
        "endpoints_id_format",
    )
    .await;
    refused(
        c,
        "INSERT INTO endpoints (id, name) VALUES ('ab', 'x')",
        "endpoints_id_format",
    )
    .await;
    refused(
        c,
        "INSERT INTO endpoints (id, name) VALUES ('Upper', 'x')",
        "endpoints_id_format",
    )
    .await;
    refused(
        c,
        "INSERT INTO endpoints (id, name) VALUES ('blank', '  ')",
        "endpoints_name_not_blank",
    )
    .await;
    refused(c, "INSERT INTO endpoints (id, name, webhook_url) VALUES ('nosecret', 'x', 'https://example.com')", "endpoints_webhook_url_and_secret_together").await;
    refused(
        c,
        &format!(
            "INSERT INTO endpoints (id, name, webhook_secret) VALUES ('nourl', 'x', '{secret}')"
        ),
        "endpoints_webhook_url_and_secret_together",
    )
    .await;
    refused(c, "INSERT INTO endpoints (id, name, webhook_url, webhook_secret) VALUES ('badsecret', 'x', 'https://e.com', 'whsec_short')", "endpoints_webhook_secret_format").await;

    // submissions
    let sub = format!("sub_{HEX32}");
    accepted(c, &format!("INSERT INTO submissions (id, endpoint_id, received_at, fields, idempotency_key, payload_fingerprint) VALUES ('{sub}', 'contact', now(), '{{}}', 'key-0123456789abcdef', '{HEX32}{HEX32}')")).await;
    refused(c, &format!("INSERT INTO submissions (id, endpoint_id, received_at, fields) VALUES ('{sub}', 'contact', now(), '{{}}')"), "submissions_pkey").await;
    refused(c, "INSERT INTO submissions (id, endpoint_id, received_at, fields) VALUES ('sub_XYZ', 'contact', now(), '{}')", "submissions_id_format").await;
    // Near misses of the 32 hex digits (migration 11 checks a length and an open
    // repetition instead of `{32}`): one too few, upper case, a non-ASCII character that
    // keeps the length at 36, a trailing newline. (One too many is longer than the
    // column's 36 characters.)
    let near_misses = [
        format!("sub_{}", &HEX32[..31]),
        format!("sub_{}", HEX32.to_uppercase()),
        format!("sub_{}é", &HEX32[..31]),
        format!("sub_{}\n", &HEX32[..31]),
    ];
    for id in &near_misses {
        refused(c, &format!("INSERT INTO submissions (id, endpoint_id, received_at, fields) VALUES ('{id}', 'contact', now(), '{{}}')"), "submissions_id_format").await;
    }
    refused(c, &format!("INSERT INTO submissions (id, endpoint_id, received_at, fields) VALUES ('sub_{}', 'nowhere', now(), '{{}}')", "1".repeat(32)), "submissions_endpoint_id_fkey").await;
    refused(c, &format!("INSERT INTO submissions (id, endpoint_id, received_at, fields, idempotency_key, payload_fingerprint) VALUES ('sub_{}', 'contact', now(), '{{}}', 'key-0123456789abcdef', '{HEX32}{HEX32}')", "2".repeat(32)), "submissions_endpoint_idempotency_key_unique").await;
    refused(c, &format!("INSERT INTO submissions (id, endpoint_id, received_at, fields, idempotency_key) VALUES ('sub_{}', 'contact', now(), '{{}}', 'only-the-key-here')", "3".repeat(32)), "submissions_idempotency_key_and_fingerprint_together").await;

    // webhook_deliveries
    let whd = format!("whd_{HEX32}");
    let insert_delivery = |id: &str, extra_cols: &str, extra_vals: &str| {
        format!(
            "INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_url, signing_secret, next_attempt_at, created_at{extra_cols}) VALUES ('{id}', NULL, 'contact', 'https://example.com/h', '{secret}', now(), now(){extra_vals})"
        )
    };
    accepted(c, &format!("INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_url, signing_secret, next_attempt_at, created_at) VALUES ('{whd}', '{sub}', 'contact', 'https://example.com/h', '{secret}', now(), now())")).await;
    refused(c, &insert_delivery(&whd, "", ""), "webhook_deliveries_pkey").await;
    refused(
        c,
        &insert_delivery("whd_bad", "", ""),
        "webhook_deliveries_id_format",
    )
    .await;
    // One delivery per (submission, destination): a second delivery of the submission to
    // another destination is fine, to the same one refused.
    let dst = |n: &str| format!("dst_{}", n.repeat(32));
    let hook = dst("a");
    let mail = dst("b");
    accepted(c, &format!("INSERT INTO destinations (id, endpoint_id, kind, position, url, secret) VALUES ('{hook}', 'contact', 'webhook', 1, 'https://example.com/h', '{secret}')")).await;
    accepted(c, &format!("INSERT INTO destinations (id, endpoint_id, kind, position, recipients) VALUES ('{mail}', 'contact', 'email', 2, '{{owner@example.com}}')")).await;
    let to_destination = |id: &str, destination: &str| {
        format!("INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_id, destination_url, signing_secret, next_attempt_at, created_at) VALUES ('{id}', '{sub}', 'contact', '{destination}', 'https://example.com/h', '{secret}', now(), now())")
    };
    accepted(
        c,
        &to_destination(&format!("whd_{}", "3".repeat(32)), &hook),
    )
    .await;
    accepted(c, &format!("INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_id, destination_url, next_attempt_at, created_at) VALUES ('whd_{}', '{sub}', 'contact', '{mail}', 'mailto:owner@example.com', now(), now())", "4".repeat(32))).await;
    refused(
        c,
        &to_destination(&format!("whd_{}", "1".repeat(32)), &hook),
        "webhook_deliveries_submission_destination_unique",
    )
    .await;
    refused(
        c,
        &to_destination(&format!("whd_{}", "5".repeat(32)), &dst("c")),
        "webhook_deliveries_destination_id_fkey",
    )
    .await;

    // destinations
    let destination = |n: &str, columns: &str, values: &str| {
        format!("INSERT INTO destinations (id, endpoint_id, position{columns}) VALUES ('{}', 'contact', {n}{values})", dst(n))
    };
    refused(
        c,
        &destination(
            "3",
            ", kind, url, secret",
            &format!(", 'webhook', 'https://e.com', '{secret}'"),
        )
        .replace(&dst("3"), &hook),
        "destinations_pkey",
    )
    .await;
    refused(c, &format!("INSERT INTO destinations (id, endpoint_id, kind, position, url, secret) VALUES ('dst_x', 'contact', 'webhook', 3, 'https://e.com', '{secret}')"), "destinations_id_format").await;
    refused(c, &format!("INSERT INTO destinations (id, endpoint_id, kind, position, url, secret) VALUES ('{}', 'nowhere', 'webhook', 3, 'https://e.com', '{secret}')", dst("3")), "destinations_endpoint_id_fkey").await;
    refused(
        c,
        &destination(
            "1",
            ", kind, url, secret",
            &format!(", 'webhook', 'https://e.com', '{secret}'"),
        )
        .replace(&dst("1"), &dst("3")),
        "destinations_endpoint_position_unique",
    )
    .await;
    refused(
        c,
        &destination("3", ", kind", ", 'sms'"),
        "destinations_kind_valid",
    )
    .await;
    refused(
        c,
        &destination("3", ", kind, url", ", 'webhook', 'https://e.com'"),
        "destinations_webhook_fields",
    )
    .await;
    refused(
        c,
        &destination(
            "3",
            ", kind, recipients, url",
            ", 'email', '{a@example.com}', 'https://e.com'",
        ),
        "destinations_email_fields",
    )
    .await;
    refused(
        c,
        &destination("3", ", kind, recipients", ", 'email', '{}'"),
        "destinations_email_fields",
    )
    .await;
    refused(
        c,
        &destination(
            "3",
            ", kind, url, secret",
            ", 'webhook', 'https://e.com', 'whsec_short'",
        ),
        "destinations_secret_format",
    )
    .await;
    let webhook = |columns: &str, values: &str| {
        destination(
            "3",
            &format!(", kind, url, secret{columns}"),
            &format!(", 'webhook', 'https://e.com', '{secret}'{values}"),
        )
    };
    refused(
        c,
        &webhook(", previous_secret", &format!(", '{secret}'")),
        "destinations_previous_secret_and_expiry_together",
    )
    .await;
    refused(
        c,
        &webhook(
            ", previous_secret, previous_secret_expires_at",
            ", 'whsec_short', now()",
        ),
        "destinations_previous_secret_format",
    )
    .await;
    refused(
        c,
        &webhook(", max_in_flight", ", 0"),
        "destinations_max_in_flight_positive",
    )
    .await;
    refused(
        c,
        &webhook(", events", ", '{submission.erased}'"),
        "destinations_events_known",
    )
    .await;
    refused(
        c,
        &webhook(", events", ", '{}'"),
        "destinations_events_known",
    )
    .await;
    refused(
        c,
        &webhook(", max_requests_per_second", ", 0"),
        "destinations_max_requests_per_second_positive",
    )
    .await;
    refused(
        c,
        &webhook(", paused_at", ", now()"),
        "destinations_pause_reason_with_pause",
    )
    .await;
    refused(
        c,
        &webhook(", paused_at, pause_reason", ", now(), 'bored'"),
        "destinations_pause_reason_valid",
    )
    .await;
    refused(
        c,
        &webhook(", consecutive_failed_deliveries", ", -1"),
        "destinations_consecutive_failed_deliveries_non_negative",
    )
    .await;
    refused(
        c,
        &webhook(
            ", removed_at, paused_at, pause_reason",
            ", now(), now(), 'operator'",
        ),
        "destinations_removed_is_bare",
    )
    .await;
    refused(c, &format!("INSERT INTO webhook_deliveries (id, submission_id, endpoint_id, destination_url, signing_secret, next_attempt_at, created_at) VALUES ('whd_{}', 'sub_{}', 'contact', 'https://e.com', '{secret}', now(), now())", "2".repeat(32), "9".repeat(32)), "webhook_deliveries_submission_id_fkey").await;
    let other = |n: &str| format!("whd_{}", n.repeat(32));
    refused(
        c,
        &insert_delivery(&other("3"), ", state", ", 'sent'"),
        "webhook_deliveries_state_valid",
    )
    .await;
    refused(
        c,
        &insert_delivery(&other("4"), ", attempts", ", -1"),
        "webhook_deliveries_attempts_non_negative",
    )
    .await;
    refused(
        c,
        &insert_delivery(&other("5"), ", attempts, cycle_attempts", ", 1, 2"),
        "webhook_deliveries_cycle_attempts_within_attempts",
    )
    .await;
    refused(
        c,
        &insert_delivery(&other("6"), ", state", ", 'delivered'"),
        "webhook_deliveries_completed_at_iff_terminal",
    )
    .await;
    refused(
        c,
        &insert_delivery(&other("7"), ", completed_at", ", now()"),
        "webhook_deliveries_completed_at_iff_terminal",
    )
    .await;
    refused(
        c,
        &insert_delivery(
            &other("8"),
            ", state, claim_token",
            &format!(", 'processing', 'clm_{HEX32}'"),
        ),
        "webhook_deliveries_claim_token_and_lease_together",
    )
    .await;
    refused(
        c,
        &insert_delivery(&other("9"), ", state", ", 'processing'"),
        "webhook_deliveries_claim_iff_processing",
    )
    .await;
    refused(
        c,
        &insert_delivery(
            &other("a"),
            ", claim_token, claim_expires_at",
            &format!(", 'clm_{HEX32}', now()"),
        ),
        "webhook_deliveries_claim_iff_processing",
    )
    .await;
    refused(
        c,
        &insert_delivery(
            &other("b"),
            ", state, claim_token, claim_expires_at",
            ", 'processing', 'clm_bad', now()",
        ),
        "webhook_deliveries_claim_token_format",
    )
    .await;
    refused(c, "INSERT INTO webhook_deliveries (id, endpoint_id, destination_url, signing_secret, next_attempt_at, created_at) VALUES ('whd_cccccccccccccccccccccccccccccccc', 'nowhere', 'https://e.com', 'x', now(), now())", "webhook_deliveries_endpoint_id_fkey").await;

    // delivery_attempts
    let insert_attempt = |id: &str, number: i32, extra_cols: &str, extra_vals: &str| {
        format!(
            "INSERT INTO delivery_attempts (id, delivery_id, submission_id, attempt_number, destination_url, attempted_at, outcome{extra_cols}) VALUES ('{id}', '{whd}', '{sub}', {number}, 'https://example.com/h', now(), 'succeeded'{extra_vals})"
        )
    };
    let att = |n: &str| format!("att_{}", n.repeat(32));
    accepted(c, &insert_attempt(&att("0"), 1, "", "")).await;
    // Attempts are partitioned by time (migration history_partitions): the unique keys
    // are each partition's own, named after it, and hold within it.
    let partition: Name = diesel::sql_query(
        "SELECT partition::text AS name FROM history_partitions('delivery_attempts') \
         WHERE lower_bound <= now() AND upper_bound > now()",
    )
    .get_result(c)
    .await
    .unwrap();
    let partition = partition.name;
    refused(
        c,
        &insert_attempt(&att("0"), 2, "", ""),
        &format!("{partition}_pkey"),
    )
    .await;
    refused(
        c,
        &insert_attempt("att_x", 2, "", ""),
        "delivery_attempts_id_format",
    )
    .await;
    refused(
        c,
        &insert_attempt(&att("1"), 1, "", ""),
        &format!("{partition}_delivery_number_unique"),
    )
    .await;
    refused(
        c,
        &insert_attempt(&att("2"), 0, "", ""),
        "delivery_attempts_number_positive",
    )
    .await;
    refused(
        c,
        &insert_attempt(&att("3"), 3, "", "").replace("'succeeded'", "'maybe'"),
        "delivery_attempts_outcome_valid",
    )
    .await;
    refused(
        c,
        &insert_attempt(&att("4"), 4, ", response_status", ", 99"),
        "delivery_attempts_response_status_range",
    )
    .await;
    refused(
        c,
        &insert_attempt(&att("5"), 5, ", duration_ms", ", -1"),
        "delivery_attempts_duration_non_negative",
    )
    .await;
    refused(
        c,
        &insert_attempt(&att("6"), 6, "", "").replace(&whd, "whd_dddddddddddddddddddddddddddddddd"),
        "delivery_attempts_delivery_id_fkey",
    )
    .await;
    refused(
        c,
        &insert_attempt(&att("7"), 7, "", "").replace(&sub, "sub_dddddddddddddddddddddddddddddddd"),
        "delivery_attempts_submission_id_fkey",
    )
    .await;

    // ON DELETE SET NULL keeps deliveries and attempts when a submission is erased (its
    // three deliveries, to no destination and to the two destinations, and one attempt).
    accepted(c, &format!("DELETE FROM submissions WHERE id = '{sub}'")).await;
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let kept: Count = diesel::sql_query("SELECT (SELECT count(*) FROM webhook_deliveries WHERE submission_id IS NULL) + (SELECT count(*) FROM delivery_attempts WHERE submission_id IS NULL) AS n")
        .get_result(c)
        .await
        .unwrap();
    assert_eq!(kept.n, 4);

    // management_api_keys
    let key = |id: &str, prefix: &str, digest: &str, name: &str| {
        format!("INSERT INTO management_api_keys (id, name, display_prefix, key_digest) VALUES ('{id}', '{name}', '{prefix}', '{digest}')")
    };
    let digest = format!("{HEX32}{HEX32}");
    let mk = format!("mk_{HEX32}");
    accepted(c, &key(&mk, "hym_live_abcdefgh", &digest, "ops")).await;
    refused(
        c,
        &key(&mk, "hym_live_abcdefgh", &"1".repeat(64), "ops"),
        "management_api_keys_pkey",
    )
    .await;
    refused(
        c,
        &key("mk_x", "hym_live_abcdefgh", &"2".repeat(64), "ops"),
        "management_api_keys_id_format",
    )
    .await;
    refused(
        c,
        &key(
            &format!("mk_{}", "1".repeat(32)),
            "hym_live_abcdefgh",
            &"3".repeat(64),
            " ",
        ),
        "management_api_keys_name_not_blank",
    )
    .await;
    refused(
        c,
        &key(
            &format!("mk_{}", "2".repeat(32)),
            "hym_test_abcdefgh",
            &"4".repeat(64),
            "ops",
        ),
        "management_api_keys_display_prefix_format",
    )
    .await;
    refused(
        c,
        &key(
            &format!("mk_{}", "3".repeat(32)),
            "hym_live_abcdefgh",
            "NOTHEX",
            "ops",
        ),
        "management_api_keys_key_digest_format",
    )
    .await;
    refused(
        c,
        &key(
            &format!("mk_{}", "4".repeat(32)),
            "hym_live_abcdefgh",
            &digest,
            "ops",
        ),
        "management_api_keys_key_digest_unique",
    )
    .await;
    refused(
        c,
        &format!(
            "INSERT INTO management_api_keys (id, name, display_prefix, key_digest, role) VALUES ('mk_{}', 'ops', 'hym_live_abcdefgh', '{}', 'root')",
            "5".repeat(32),
            "5".repeat(64)
        ),
        "management_api_keys_role_check",
    )
    .await;

    // delivery_state_counts (kept by triggers; the checks still hold for direct writes)
    refused(
        c,
        "INSERT INTO delivery_state_counts VALUES ('contact', 'failed', 16, 1)",
        "delivery_state_counts_shard_range",
    )
    .await;
    refused(
        c,
        "INSERT INTO delivery_state_counts VALUES ('nowhere', 'failed', 1, 1)",
        "delivery_state_counts_endpoint_id_fkey",
    )
    .await;

    refused(
        c,
        "INSERT INTO delivery_state_counts VALUES ('contact', 'pending', 1, 1)",
        "delivery_state_counts_terminal_state",
    )
    .await;

    // rate_limit_counters
    accepted(c, "INSERT INTO rate_limit_counters (limiter, subject, window_start, attempts) VALUES ('ip', 'abc', '2026-01-01T00:00:00Z', 1)").await;
    refused(c, "INSERT INTO rate_limit_counters (limiter, subject, window_start, attempts) VALUES ('ip', 'abc', '2026-01-01T00:00:00Z', 1)", "rate_limit_counters_pkey").await;
    refused(c, "INSERT INTO rate_limit_counters (limiter, subject, window_start, attempts) VALUES ('ip', 'abd', '2026-01-01T00:00:00Z', 0)", "rate_limit_counters_attempts_positive").await;

    // endpoints: rotation, pausing, deletion
    let update = |set: &str| format!("UPDATE endpoints SET {set} WHERE id = 'contact'");
    refused(
        c,
        &update("previous_webhook_secret = webhook_secret"),
        "endpoints_previous_secret_and_expiry_together",
    )
    .await;
    refused(
        c,
        &update("previous_secret_expires_at = now()"),
        "endpoints_previous_secret_and_expiry_together",
    )
    .await;
    refused(
        c,
        &update("previous_webhook_secret = 'whsec_short', previous_secret_expires_at = now()"),
        "endpoints_previous_secret_format",
    )
    .await;
    accepted(
        c,
        &update("previous_webhook_secret = webhook_secret, previous_secret_expires_at = now()"),
    )
    .await;
    refused(
        c,
        &update("webhook_url = NULL, webhook_secret = NULL"),
        "endpoints_previous_secret_needs_current",
    )
    .await;
    refused(
        c,
        &update("paused_at = now()"),
        "endpoints_pause_reason_with_pause",
    )
    .await;
    refused(
        c,
        &update("pause_reason = 'gone'"),
        "endpoints_pause_reason_with_pause",
    )
    .await;
    refused(
        c,
        &update("paused_at = now(), pause_reason = 'bored'"),
        "endpoints_pause_reason_valid",
    )
    .await;
    accepted(c, &update("paused_at = now(), pause_reason = 'gone'")).await;
    refused(
        c,
        &update("consecutive_failed_deliveries = -1"),
        "endpoints_consecutive_failed_deliveries_non_negative",
    )
    .await;
    refused(
        c,
        &update("deleted_at = now(), is_active = false"),
        "endpoints_deleted_is_bare",
    )
    .await;
    accepted(c, "INSERT INTO endpoints (id, name, is_active, deleted_at) VALUES ('gone', 'Gone', false, now())").await;
    refused(
        c,
        "INSERT INTO endpoints (id, name, deleted_at) VALUES ('gone-active', 'Gone', now())",
        "endpoints_deleted_is_bare",
    )
    .await;

    // endpoint_events
    accepted(c, "INSERT INTO endpoint_events (endpoint_id, kind, reason, occurred_at) VALUES ('contact', 'paused', 'operator', now())").await;
    refused(c, "INSERT INTO endpoint_events (endpoint_id, kind, occurred_at) VALUES ('contact', 'archived', now())", "endpoint_events_kind").await;
    refused(c, "INSERT INTO endpoint_events (endpoint_id, kind, occurred_at) VALUES ('contact', 'paused', now())", "endpoint_events_reason").await;
    refused(c, "INSERT INTO endpoint_events (endpoint_id, kind, reason, occurred_at) VALUES ('contact', 'resumed', 'gone', now())", "endpoint_events_reason").await;
    refused(c, "INSERT INTO endpoint_events (endpoint_id, kind, reason, occurred_at) VALUES ('contact', 'paused', 'bored', now())", "endpoint_events_reason").await;

    // endpoint_spam_protection
    let protect = |columns: &str, values: &str| {
        format!("INSERT INTO endpoint_spam_protection (endpoint_id, updated_at{columns}) VALUES ('contact', now(){values})")
    };
    for (columns, values, constraint) in [
        (
            ", captcha_provider, captcha_secret",
            ", 'recaptcha', 's'",
            "endpoint_spam_protection_provider_valid",
        ),
        (
            ", captcha_provider",
            ", 'turnstile'",
            "endpoint_spam_protection_captcha_whole",
        ),
        (
            ", captcha_secret",
            ", 's'",
            "endpoint_spam_protection_captcha_whole",
        ),
        (
            ", captcha_provider, captcha_secret",
            ", 'recaptcha_v3', 's'",
            "endpoint_spam_protection_score_only_v3",
        ),
        (
            ", captcha_provider, captcha_secret, captcha_min_score",
            ", 'turnstile', 's', 0.5",
            "endpoint_spam_protection_score_only_v3",
        ),
        (
            ", captcha_provider, captcha_secret, captcha_min_score",
            ", 'recaptcha_v3', 's', 1.5",
            "endpoint_spam_protection_score_range",
        ),
        (
            ", when_unreachable",
            ", 'ignore'",
            "endpoint_spam_protection_when_unreachable_valid",
        ),
        (
            ", max_links",
            ", -1",
            "endpoint_spam_protection_max_links_valid",
        ),
        (
            ", min_fill_seconds",
            ", 0",
            "endpoint_spam_protection_min_fill_valid",
        ),
        (
            ", min_fill_seconds",
            ", 3601",
            "endpoint_spam_protection_min_fill_valid",
        ),
        (
            ", blocked_patterns",
            ", array_fill('x'::text, ARRAY[51])",
            "endpoint_spam_protection_lists_bounded",
        ),
    ] {
        refused(c, &protect(columns, values), constraint).await;
    }
    accepted(
        c,
        &protect(
            ", captcha_provider, captcha_secret, captcha_min_score",
            ", 'recaptcha_v3', 's', 0.5",
        ),
    )
    .await;
    refused(c, &protect("", ""), "endpoint_spam_protection_pkey").await;

    // submissions' spam reasons, captcha tokens
    refused(
        c,
        &format!("INSERT INTO submissions (id, endpoint_id, received_at, fields, spam, spam_reasons) VALUES ('sub_{HEX32}', 'contact', now(), '{{}}', true, array_fill('r'::text, ARRAY[17]))"),
        "submissions_spam_reasons_bounded",
    )
    .await;
    accepted(
        c,
        "INSERT INTO captcha_tokens_seen (token_digest, seen_at) VALUES ('d', now())",
    )
    .await;
    refused(
        c,
        "INSERT INTO captcha_tokens_seen (token_digest, seen_at) VALUES ('d', now())",
        "captcha_tokens_seen_pkey",
    )
    .await;
}

#[derive(diesel::QueryableByName, Debug)]
struct IndexDef {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    definition: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn claiming_indexes_are_partial() {
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let indexes: Vec<IndexDef> = diesel::sql_query(
        "SELECT indexname::text AS name, indexdef::text AS definition FROM pg_indexes WHERE tablename = 'webhook_deliveries'",
    )
    .load(&mut conn)
    .await
    .unwrap();
    let find = |name: &str| {
        indexes
            .iter()
            .find(|i| i.name == name)
            .unwrap_or_else(|| panic!("{name} missing: {indexes:?}"))
    };
    assert!(find("webhook_deliveries_pending_due_idx")
        .definition
        .contains("WHERE ((state)::text = 'pending'::text)"));
    assert!(find("webhook_deliveries_processing_lease_idx")
        .definition
        .contains("WHERE ((state)::text = 'processing'::text)"));
}

/// A concurrent index build that failed (or whose process was killed) leaves an invalid
/// index behind, which `CREATE INDEX CONCURRENTLY IF NOT EXISTS` would take for done: the
/// runner drops it before applying, and the migration still pending builds it for real.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_concurrent_index_build_is_built_again() {
    use diesel_async::SimpleAsyncConnection;
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let index = "webhook_deliveries_destination_created_at_id_idx";
    // As if its migration had never finished: the index is not there, nor the record.
    conn.batch_execute(&format!("DROP INDEX {index}"))
        .await
        .unwrap();
    conn.batch_execute("DELETE FROM __diesel_schema_migrations WHERE version = '20261205000018'")
        .await
        .unwrap();
    // A build of that name that fails half-way: a unique index over duplicates.
    conn.batch_execute(
        "INSERT INTO endpoints (id, name) VALUES ('contact', 'Contact');
         INSERT INTO webhook_deliveries (id, endpoint_id, destination_url, signing_secret, next_attempt_at, created_at)
             SELECT 'whd_' || lpad(to_hex(n), 32, '0'), 'contact', 'https://example.com/h',
                    'whsec_' || repeat('ab', 32), now(), now()
             FROM generate_series(1, 2) AS n"
    )
    .await
    .unwrap();
    conn.batch_execute(&format!(
        "CREATE UNIQUE INDEX CONCURRENTLY {index} ON webhook_deliveries ((1))"
    ))
    .await
    .expect_err("the duplicates fail the build");
    let valid = async |conn: &mut AsyncPgConnection| -> Vec<Name> {
        diesel::sql_query(format!(
            "SELECT CASE WHEN i.indisvalid THEN 'valid' ELSE 'invalid' END
                    || ' ' || pg_get_indexdef(i.indexrelid) AS name
             FROM pg_index i WHERE i.indexrelid = to_regclass('{index}')"
        ))
        .load(conn)
        .await
        .unwrap()
    };
    assert!(valid(&mut conn).await[0]
        .name
        .starts_with("invalid CREATE UNIQUE"));

    let applied = migrations::run_pending(&db.url).await.unwrap();
    assert_eq!(applied.len(), 1, "{applied:?}");
    let after = valid(&mut conn).await;
    assert_eq!(after.len(), 1);
    assert_eq!(
        after[0].name,
        format!("valid CREATE INDEX {index} ON public.webhook_deliveries USING btree (destination_id, created_at, id)")
    );
}

/// Migration history_destinations names the destination of every delivery written before
/// destinations, as every reader used to read it: the history its endpoint's upgraded
/// webhook (position 1, created no later than the delivery), the queue its endpoint's first
/// webhook not removed. A delivery with no such destination keeps none. It walks in
/// batches of 10,000, each committed: 25,000 deliveries take three.
#[tokio::test(flavor = "multi_thread")]
async fn history_before_destinations_is_given_its_destination() {
    use diesel_async::SimpleAsyncConnection;
    let db = TestDb::new().await;
    // Back to just before it (and the migrations after it).
    let status = migrations::status(&db.url).await.unwrap();
    let since = 1 + status
        .iter()
        .rev()
        .position(|m| m.name.contains("000039_history_destinations"))
        .expect("migration history_destinations");
    let reverted = migrations::revert_newest(&db.url, since).await.unwrap();
    assert!(
        reverted.last().is_some_and(|name| name.contains("000039")),
        "{reverted:?}"
    );
    let secret = format!("whsec_{HEX32}{HEX32}");
    let dst = |n: &str| format!("dst_{}", n.repeat(32));
    let (upgraded, mail, later, removed, live) = (dst("a"), dst("b"), dst("c"), dst("d"), dst("e"));
    let mut conn = db.connect().await;
    conn.batch_execute(&format!(
        "INSERT INTO endpoints (id, name) VALUES ('contact', 'Contact'), ('newer', 'Newer'),
                ('moved', 'Moved'), ('gone', 'Gone');
         INSERT INTO destinations (id, endpoint_id, kind, position, url, secret, recipients,
                                   created_at, removed_at) VALUES
             ('{upgraded}', 'contact', 'webhook', 1, 'https://example.com/h', '{secret}', NULL, '2026-01-01', NULL),
             ('{mail}', 'contact', 'email', 2, NULL, NULL, '{{owner@example.com}}', '2026-01-01', NULL),
             ('{later}', 'newer', 'webhook', 1, 'https://example.com/h', '{secret}', NULL, '2026-06-01', NULL),
             ('{removed}', 'moved', 'webhook', 1, 'https://example.com/h', '{secret}', NULL, '2026-01-01', '2026-03-01'),
             ('{live}', 'moved', 'webhook', 2, 'https://example.com/h', '{secret}', NULL, '2026-03-01', NULL);
         -- 25,000 delivered of contact's upgraded webhook, all without a destination.
         INSERT INTO webhook_deliveries (id, endpoint_id, destination_url, signing_secret,
                                         state, attempts, next_attempt_at, created_at, completed_at)
         SELECT 'whd_' || lpad(to_hex(g), 32, '0'), 'contact', 'https://example.com/h',
                '{secret}', 'delivered', 1, '2026-02-01', '2026-02-01', '2026-02-01'
         FROM generate_series(1, 25000) g;
         INSERT INTO webhook_deliveries (id, endpoint_id, destination_url, signing_secret,
                                         state, attempts, next_attempt_at, created_at, completed_at)
         VALUES
             -- newer's webhook came after this one was sent: not its destination.
             ('whd_{n1}', 'newer', 'https://example.com/h', '{secret}', 'failed', 1, '2026-02-01', '2026-02-01', '2026-02-01'),
             -- gone has no destination at all.
             ('whd_{n2}', 'gone', 'https://example.com/h', '{secret}', 'failed', 1, '2026-02-01', '2026-02-01', '2026-02-01'),
             -- queued by a process of the release before destinations: the first webhook
             -- not removed.
             ('whd_{n3}', 'moved', 'https://example.com/h', '{secret}', 'pending', 0, '2026-04-01', '2026-04-01', NULL),
             -- moved's history: the upgraded webhook, removed since.
             ('whd_{n4}', 'moved', 'https://example.com/h', '{secret}', 'failed', 1, '2026-02-01', '2026-02-01', '2026-02-01');",
        n1 = "1".repeat(32),
        n2 = "2".repeat(32),
        n3 = "3".repeat(32),
        n4 = "4".repeat(32),
    ))
    .await
    .unwrap();

    migrations::run_pending(&db.url).await.unwrap();

    let named = |endpoint: &str, destination: &str| {
        format!("SELECT count(*) AS n FROM webhook_deliveries WHERE endpoint_id = '{endpoint}' AND destination_id = '{destination}'")
    };
    assert_eq!(db.count(&named("contact", &upgraded)).await, 25_000);
    assert_eq!(db.count(&named("moved", &live)).await, 1);
    assert_eq!(db.count(&named("moved", &removed)).await, 1);
    assert_eq!(
        db.count("SELECT count(*) AS n FROM webhook_deliveries WHERE destination_id IS NULL")
            .await,
        2,
        "newer's early delivery and gone's keep none"
    );
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) AS n FROM webhook_deliveries WHERE id IN ('whd_{}', 'whd_{}') AND destination_id IS NULL",
            "1".repeat(32),
            "2".repeat(32)
        ))
        .await,
        2
    );
    // The counts the trigger keeps saw no change of state.
    assert_eq!(
        db.count("SELECT coalesce(sum(deliveries), 0)::bigint AS n FROM delivery_state_counts WHERE state = 'delivered'").await,
        25_000
    );
}

/// Migration projects moves an installation into the default project: every endpoint in
/// it, every key a key of every project, and the API answers as before.
#[tokio::test(flavor = "multi_thread")]
async fn an_installation_moves_into_the_default_project() {
    use diesel_async::SimpleAsyncConnection;
    let db = TestDb::new().await;
    let status = migrations::status(&db.url).await.unwrap();
    let since = 1 + status
        .iter()
        .rev()
        .position(|m| m.name.contains("000049_projects"))
        .expect("migration projects");
    let reverted = migrations::revert_newest(&db.url, since).await.unwrap();
    assert!(
        reverted.last().is_some_and(|name| name.contains("000049")),
        "{reverted:?}"
    );
    let mut conn = db.connect().await;
    conn.batch_execute(&format!(
        "INSERT INTO endpoints (id, name) VALUES ('contact', 'Contact'), ('shop', 'Shop');
         INSERT INTO management_api_keys (id, name, display_prefix, key_digest, created_at)
         VALUES ('mk_{hex}', 'ops', 'hym_live_abcdefgh', '{digest}', now());",
        hex = "a".repeat(32),
        digest = "b".repeat(64),
    ))
    .await
    .unwrap();
    migrations::run_pending(&db.url).await.unwrap();
    let default = "prj_00000000000000000000000000000000";
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) AS n FROM endpoints WHERE project_id = '{default}'"
        ))
        .await,
        2
    );
    assert_eq!(
        db.count("SELECT count(*) AS n FROM management_api_keys WHERE project_id IS NULL AND expires_at IS NULL")
            .await,
        1
    );
    assert_eq!(
        db.count(&format!("SELECT count(*) AS n FROM projects WHERE id = '{default}' AND name = 'Default' AND deleted_at IS NULL"))
            .await,
        1
    );
}
