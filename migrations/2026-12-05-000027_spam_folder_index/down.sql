DROP INDEX CONCURRENTLY IF EXISTS submissions_spam_received_at_idx;
