-- How many submissions retention would delete now (after retention_expired.sql).
SELECT count(*) AS expired FROM candidates
