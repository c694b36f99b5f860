// @generated automatically by Diesel CLI.

diesel::table! {
    audit_entries (id) {
        id -> Int8,
        at -> Timestamptz,
        #[max_length = 35]
        key_id -> Varchar,
        #[max_length = 200]
        key_name -> Varchar,
        #[max_length = 36]
        project_id -> Nullable<Varchar>,
        #[max_length = 64]
        operation -> Varchar,
        targets -> Array<Nullable<Text>>,
        changes -> Jsonb,
        #[max_length = 64]
        address_digest -> Nullable<Varchar>,
    }
}

diesel::table! {
    autoresponder_recipients (destination_id, address_digest) {
        #[max_length = 36]
        destination_id -> Varchar,
        #[max_length = 32]
        address_digest -> Varchar,
        quiet_until -> Timestamptz,
        #[max_length = 36]
        submission_id -> Varchar,
    }
}

diesel::table! {
    captcha_tokens_seen (token_digest) {
        #[max_length = 64]
        token_digest -> Varchar,
        seen_at -> Timestamptz,
    }
}

diesel::table! {
    endpoint_spam_protection (endpoint_id) {
        #[max_length = 64]
        endpoint_id -> Varchar,
        #[max_length = 16]
        captcha_provider -> Nullable<Varchar>,
        #[max_length = 200]
        captcha_secret -> Nullable<Varchar>,
        captcha_min_score -> Nullable<Float4>,
        #[max_length = 8]
        when_unreachable -> Varchar,
        max_links -> Nullable<Int4>,
        blocked_words -> Array<Nullable<Text>>,
        blocked_patterns -> Array<Nullable<Text>>,
        blocked_senders -> Array<Nullable<Text>>,
        min_fill_seconds -> Nullable<Int4>,
        akismet -> Bool,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    delivery_attempts (id) {
        #[max_length = 36]
        id -> Varchar,
        #[max_length = 36]
        delivery_id -> Varchar,
        #[max_length = 36]
        submission_id -> Nullable<Varchar>,
        attempt_number -> Int4,
        #[max_length = 2048]
        destination_url -> Varchar,
        attempted_at -> Timestamptz,
        #[max_length = 32]
        outcome -> Varchar,
        response_status -> Nullable<Int4>,
        #[max_length = 500]
        error -> Nullable<Varchar>,
        duration_ms -> Int4,
        late -> Bool,
        #[max_length = 500]
        reply -> Nullable<Varchar>,
    }
}

diesel::table! {
    delivery_event_retention (singleton) {
        singleton -> Bool,
        pruned_through -> Int8,
    }
}

diesel::table! {
    delivery_events (id) {
        id -> Int8,
        #[max_length = 36]
        delivery_id -> Varchar,
        #[max_length = 64]
        endpoint_id -> Varchar,
        #[max_length = 32]
        kind -> Varchar,
        #[max_length = 16]
        state -> Varchar,
        #[max_length = 16]
        previous_state -> Nullable<Varchar>,
        attempts -> Int4,
        cycle_attempts -> Int4,
        #[max_length = 32]
        outcome -> Nullable<Varchar>,
        occurred_at -> Timestamptz,
    }
}

diesel::table! {
    delivery_state_counts (endpoint_id, state, shard) {
        #[max_length = 64]
        endpoint_id -> Varchar,
        #[max_length = 16]
        state -> Varchar,
        shard -> Int2,
        deliveries -> Int8,
    }
}

diesel::table! {
    destination_throttles (destination_id) {
        #[max_length = 36]
        destination_id -> Varchar,
        next_at -> Timestamptz,
    }
}

diesel::table! {
    destinations (id) {
        #[max_length = 36]
        id -> Varchar,
        #[max_length = 64]
        endpoint_id -> Varchar,
        #[max_length = 16]
        kind -> Varchar,
        position -> Int4,
        #[max_length = 2048]
        url -> Nullable<Varchar>,
        #[max_length = 70]
        secret -> Nullable<Varchar>,
        #[max_length = 70]
        previous_secret -> Nullable<Varchar>,
        previous_secret_expires_at -> Nullable<Timestamptz>,
        recipients -> Nullable<Array<Nullable<Text>>>,
        #[max_length = 128]
        reply_to_field -> Nullable<Varchar>,
        max_in_flight -> Nullable<Int4>,
        events -> Array<Varchar>,
        max_requests_per_second -> Nullable<Int4>,
        paused_at -> Nullable<Timestamptz>,
        #[max_length = 32]
        pause_reason -> Nullable<Varchar>,
        consecutive_failed_deliveries -> Int4,
        created_at -> Timestamptz,
        removed_at -> Nullable<Timestamptz>,
        #[max_length = 200]
        reply_subject -> Nullable<Varchar>,
        #[max_length = 5000]
        reply_body -> Nullable<Varchar>,
        reply_window_seconds -> Nullable<Int4>,
        #[max_length = 16]
        body_format -> Varchar,
        body_template -> Nullable<Text>,
        email_template -> Nullable<Jsonb>,
        request_headers -> Jsonb,
        request_auth -> Nullable<Jsonb>,
        #[max_length = 49]
        ed25519_key -> Nullable<Varchar>,
        retry_policy -> Nullable<Jsonb>,
        client_certificate -> Nullable<Text>,
        client_key -> Nullable<Text>,
        client_ca -> Nullable<Text>,
        ordered -> Bool,
    }
}

diesel::table! {
    endpoint_events (id) {
        id -> Int8,
        #[max_length = 64]
        endpoint_id -> Varchar,
        #[max_length = 16]
        kind -> Varchar,
        #[max_length = 32]
        reason -> Nullable<Varchar>,
        occurred_at -> Timestamptz,
        #[max_length = 36]
        destination_id -> Nullable<Varchar>,
    }
}

diesel::table! {
    endpoints (id) {
        #[max_length = 64]
        id -> Varchar,
        #[max_length = 200]
        name -> Varchar,
        is_active -> Bool,
        created_at -> Timestamptz,
        #[max_length = 2048]
        webhook_url -> Nullable<Varchar>,
        #[max_length = 70]
        webhook_secret -> Nullable<Varchar>,
        #[max_length = 2048]
        redirect_url -> Nullable<Varchar>,
        allowed_origins -> Array<Nullable<Text>>,
        #[max_length = 128]
        honeypot_field -> Nullable<Varchar>,
        #[max_length = 70]
        previous_webhook_secret -> Nullable<Varchar>,
        previous_secret_expires_at -> Nullable<Timestamptz>,
        paused_at -> Nullable<Timestamptz>,
        #[max_length = 32]
        pause_reason -> Nullable<Varchar>,
        consecutive_failed_deliveries -> Int4,
        deleted_at -> Nullable<Timestamptz>,
        file_uploads -> Nullable<Jsonb>,
        retention_days -> Nullable<Int4>,
        spam_retention_days -> Nullable<Int4>,
        #[max_length = 36]
        project_id -> Varchar,
    }
}

diesel::table! {
    event_timelines (timeline) {
        timeline -> Int4,
        entered_at -> Timestamptz,
    }
}

diesel::table! {
    form_stamps_spent (stamp_digest) {
        #[max_length = 64]
        stamp_digest -> Varchar,
        expires_at -> Timestamptz,
    }
}

diesel::table! {
    management_api_keys (id) {
        #[max_length = 35]
        id -> Varchar,
        #[max_length = 200]
        name -> Varchar,
        #[max_length = 17]
        display_prefix -> Varchar,
        #[max_length = 64]
        key_digest -> Varchar,
        created_at -> Timestamptz,
        revoked_at -> Nullable<Timestamptz>,
        last_used_at -> Nullable<Timestamptz>,
        #[max_length = 16]
        role -> Varchar,
        #[max_length = 36]
        project_id -> Nullable<Varchar>,
        expires_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    projects (id) {
        #[max_length = 36]
        id -> Varchar,
        #[max_length = 200]
        name -> Varchar,
        created_at -> Timestamptz,
        deleted_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    operator_alerts (id) {
        id -> Int8,
        event_id -> Int8,
        #[max_length = 16]
        kind -> Varchar,
        #[max_length = 64]
        endpoint_id -> Varchar,
        #[max_length = 36]
        destination_id -> Varchar,
        #[max_length = 32]
        reason -> Nullable<Varchar>,
        failed_deliveries -> Int4,
        occurred_at -> Timestamptz,
        email_sent_at -> Nullable<Timestamptz>,
        webhook_sent_at -> Nullable<Timestamptz>,
        attempts -> Int4,
        next_attempt_at -> Nullable<Timestamptz>,
        #[max_length = 200]
        last_error -> Nullable<Varchar>,
    }
}

diesel::table! {
    rate_limit_counters (limiter, subject, window_start) {
        #[max_length = 32]
        limiter -> Varchar,
        #[max_length = 128]
        subject -> Varchar,
        window_start -> Timestamptz,
        attempts -> Int4,
        attempt_limit -> Nullable<Int4>,
    }
}

diesel::table! {
    server_secrets (name) {
        #[max_length = 64]
        name -> Varchar,
        secret -> Bytea,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    submission_file_chunks (file_id, seq) {
        #[max_length = 36]
        file_id -> Varchar,
        seq -> Int4,
        data -> Bytea,
    }
}

diesel::table! {
    submission_files (id) {
        #[max_length = 36]
        id -> Varchar,
        #[max_length = 64]
        endpoint_id -> Varchar,
        #[max_length = 36]
        submission_id -> Nullable<Varchar>,
        #[max_length = 1024]
        field -> Varchar,
        #[max_length = 1024]
        name -> Varchar,
        #[max_length = 255]
        content_type -> Varchar,
        size_bytes -> Int8,
        #[max_length = 64]
        sha256 -> Nullable<Varchar>,
        #[max_length = 16]
        storage -> Varchar,
        #[max_length = 1024]
        object_key -> Nullable<Varchar>,
        position -> Int4,
        created_at -> Timestamptz,
        attached_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    submissions (id) {
        #[max_length = 36]
        id -> Varchar,
        #[max_length = 64]
        endpoint_id -> Varchar,
        received_at -> Timestamptz,
        fields -> Json,
        #[max_length = 255]
        idempotency_key -> Nullable<Varchar>,
        #[max_length = 64]
        payload_fingerprint -> Nullable<Varchar>,
        spam -> Bool,
        spam_reasons -> Array<Nullable<Text>>,
        spam_reviewed_at -> Nullable<Timestamptz>,
        #[max_length = 128]
        trace_parent -> Nullable<Varchar>,
    }
}

diesel::table! {
    webhook_deliveries (id) {
        #[max_length = 36]
        id -> Varchar,
        #[max_length = 36]
        submission_id -> Nullable<Varchar>,
        #[max_length = 64]
        endpoint_id -> Varchar,
        #[max_length = 2048]
        destination_url -> Varchar,
        #[max_length = 70]
        signing_secret -> Nullable<Varchar>,
        #[max_length = 16]
        state -> Varchar,
        attempts -> Int4,
        cycle_attempts -> Int4,
        next_attempt_at -> Timestamptz,
        claim_expires_at -> Nullable<Timestamptz>,
        #[max_length = 36]
        claim_token -> Nullable<Varchar>,
        created_at -> Timestamptz,
        completed_at -> Nullable<Timestamptz>,
        #[max_length = 36]
        destination_id -> Nullable<Varchar>,
    }
}

diesel::joinable!(delivery_attempts -> submissions (submission_id));
diesel::joinable!(delivery_attempts -> webhook_deliveries (delivery_id));
diesel::joinable!(delivery_state_counts -> endpoints (endpoint_id));
diesel::joinable!(destinations -> endpoints (endpoint_id));
diesel::joinable!(endpoint_spam_protection -> endpoints (endpoint_id));
diesel::joinable!(endpoints -> projects (project_id));
diesel::joinable!(management_api_keys -> projects (project_id));
diesel::joinable!(submission_file_chunks -> submission_files (file_id));
diesel::joinable!(submission_files -> submissions (submission_id));
diesel::joinable!(submissions -> endpoints (endpoint_id));
diesel::joinable!(webhook_deliveries -> destinations (destination_id));
diesel::joinable!(webhook_deliveries -> endpoints (endpoint_id));
diesel::joinable!(webhook_deliveries -> submissions (submission_id));

diesel::allow_tables_to_appear_in_same_query!(
    audit_entries,
    autoresponder_recipients,
    captcha_tokens_seen,
    delivery_attempts,
    delivery_event_retention,
    delivery_events,
    delivery_state_counts,
    destination_throttles,
    destinations,
    endpoint_events,
    endpoint_spam_protection,
    endpoints,
    event_timelines,
    form_stamps_spent,
    management_api_keys,
    operator_alerts,
    projects,
    rate_limit_counters,
    server_secrets,
    submission_file_chunks,
    submission_files,
    submissions,
    webhook_deliveries,
);
