DROP INDEX CONCURRENTLY IF EXISTS submissions_search_idx;
