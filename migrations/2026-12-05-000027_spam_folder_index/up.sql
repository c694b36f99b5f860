-- The spam folder listed per endpoint, newest first, and spam's own retention: only the
-- few rows judged spam, beside the listing index every submission is in. (See
-- destination_due_index for why CONCURRENTLY.)
CREATE INDEX CONCURRENTLY IF NOT EXISTS submissions_spam_received_at_idx
    ON submissions (endpoint_id, received_at, id) WHERE spam;
