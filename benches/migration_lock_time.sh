#!/usr/bin/env bash
# How long do migrations hold up writers, on a large history? By default the migrations
# that introduce destinations (000015 onwards: docs/BENCHMARKS.md, "Migrating to
# destinations: lock time on 10 million deliveries"); with BENCH_FROM_MIGRATION=31 those
# that partition the history (000031 onwards: "Partitioning the history in place: lock time
# on 10 million rows"), on a history that then also holds one event per delivery; with
# BENCH_FROM_MIGRATION=39 the backfill of every delivery's destination ("Backfilling
# destinations (migration 39)"), on a history whose endpoints have their destinations.
#
#   benches/migration_lock_time.sh [DELIVERIES]        (default 10,000,000; or BENCH_DELIVERIES)
#
# What it does, all on a throwaway PostgreSQL cluster of its own (127.0.0.1, a free port,
# a temporary data directory, stopped and removed on exit):
#
# 1. applies the migrations before BENCH_FROM_MIGRATION (15) with psql, each in one
#    transaction (or none, as its metadata.toml says);
# 2. loads a history of DELIVERIES deliveries over 1,000 endpoints: one submission per
#    delivery, nearly all delivered (5% failed), a queue of pending ones (1 in 2,000) and a
#    few in flight, one attempt per finished delivery; set-based inserts in one transaction
#    (generate_series, triggers and foreign-key checks off while loading, the terminal
#    counts filled by one GROUP BY as migration 000003 does), then VACUUM ANALYZE and a
#    restart with WAL at `replica`, as a production cluster runs;
# 3. starts two writers, each on its own connection, doing what the previous release does
#    while an upgrade applies the migrations: intake (a submission and its delivery, with
#    its `created` event, in one statement, so one transaction) and the queue (a pending
#    delivery claimed, `processing` with a token and a lease, then handed back), each
#    transaction's latency recorded; a pause of BENCH_WRITER_PAUSE_MS between
#    transactions; each stops by itself after BENCH_WRITER_MAX_TRANSACTIONS or
#    BENCH_WRITER_MAX_SECONDS, or when the run says so;
# 4. measures the writers' baseline for BENCH_BASELINE_SECONDS, then applies 000015 onwards
#    as the product does (src/db/migrations.rs: Diesel runs each up.sql as one batch,
#    inside a transaction unless its metadata.toml says run_in_transaction = false):
#    each in one transaction but 000016..000019, each its single
#    statement outside a transaction; then BENCH_TAIL_SECONDS more of the writers;
# 5. prints, per step, its wall time and, of the writers' transactions that started during
#    it, the max and p99 latency (and their ratios to the baseline) and how many writer
#    transactions completed during it; and the slowest statements of each step.
#
# Environment: BENCH_FROM_MIGRATION (15), BENCH_DELIVERIES, BENCH_ENDPOINTS (1000), BENCH_BASELINE_SECONDS (20),
# BENCH_TAIL_SECONDS (5), BENCH_WRITER_PAUSE_MS (20), BENCH_WRITER_MAX_TRANSACTIONS
# (1000000 per writer), BENCH_WRITER_MAX_SECONDS (10800), BENCH_SHARED_BUFFERS (2GB),
# BENCH_DIR (where the temporary cluster goes; default: a new directory under $TMPDIR or
# /tmp), BENCH_PG_BIN (PostgreSQL's bin directory; default: the newest
# /usr/lib/postgresql/*/bin), BENCH_KEEP_LOGS (a directory to copy the logs to).
#
# Ten million deliveries take several minutes to load on a small machine and about 15 GB
# of disk while the migrations run; 100000 is a quick check.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
migrations="$repo/migrations"

deliveries=${1:-${BENCH_DELIVERIES:-10000000}}
endpoints=${BENCH_ENDPOINTS:-1000}
baseline_seconds=${BENCH_BASELINE_SECONDS:-20}
tail_seconds=${BENCH_TAIL_SECONDS:-5}
writer_pause_ms=${BENCH_WRITER_PAUSE_MS:-20}
writer_max_transactions=${BENCH_WRITER_MAX_TRANSACTIONS:-1000000}
writer_max_seconds=${BENCH_WRITER_MAX_SECONDS:-10800}
shared_buffers=${BENCH_SHARED_BUFFERS:-2GB}
from_migration=${BENCH_FROM_MIGRATION:-15}

for value in "$from_migration" "$deliveries" "$endpoints" "$baseline_seconds" "$tail_seconds" \
    "$writer_pause_ms" "$writer_max_transactions" "$writer_max_seconds"; do
    if ! [[ $value =~ ^[0-9]+$ ]]; then
        echo "not a whole number: $value" >&2
        exit 2
    fi
done
if ((deliveries < 10000 || endpoints < 1)); then
    echo "at least 10000 deliveries and one endpoint" >&2
    exit 2
fi

say() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# --- The programs -----------------------------------------------------------------------

missing() {
    echo "missing: $1. Install $2 (Debian: apt-get install $2), or set BENCH_PG_BIN to PostgreSQL's bin directory." >&2
    exit 3
}
if [[ -n ${BENCH_PG_BIN:-} ]]; then
    pg_bin=$BENCH_PG_BIN
else
    pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
fi
[[ -n $pg_bin && -d $pg_bin ]] || missing "PostgreSQL's server programs (/usr/lib/postgresql/*/bin)" postgresql
for program in initdb pg_ctl postgres psql; do
    [[ -x $pg_bin/$program ]] || missing "$pg_bin/$program" postgresql
done
for program in awk sort date mktemp; do
    command -v "$program" >/dev/null || missing "$program" coreutils
done
if ((EUID == 0)); then
    command -v runuser >/dev/null || missing runuser util-linux
    id -u postgres >/dev/null 2>&1 || missing "the postgres user" postgresql
    as_server() { runuser -u postgres -- "$@"; }
else
    as_server() { "$@"; }
fi

# --- A throwaway cluster ----------------------------------------------------------------

work=${BENCH_DIR:-}
if [[ -z $work ]]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/hymical-migbench.XXXXXX")
else
    mkdir -p "$work"
    work=$(mktemp -d "$work/hymical-migbench.XXXXXX")
fi
data=$work/data
logs=$work/logs
mkdir -p "$logs"
chmod 755 "$work"
if ((EUID == 0)); then chown postgres "$work"; fi

writer_pids=()
started=false
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    for pid in "${writer_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    if $started; then
        as_server "$pg_bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    if [[ -n ${BENCH_KEEP_LOGS:-} ]]; then
        mkdir -p "$BENCH_KEEP_LOGS"
        cp -r "$logs/." "$BENCH_KEEP_LOGS/" 2>/dev/null || true
        cp "$work/server.log" "$BENCH_KEEP_LOGS/" 2>/dev/null || true
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=
for candidate in $(seq 54330 54429 | shuf 2>/dev/null || seq 54330 54429); do
    if port_free "$candidate"; then port=$candidate; break; fi
done
[[ -n $port ]] || { echo "no free port in 54330..54429" >&2; exit 4; }

say "cluster in $work, port $port, $pg_bin"
as_server "$pg_bin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 \
    --locale=C.UTF-8 >"$logs/initdb.log" 2>&1 \
    || as_server "$pg_bin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 \
        --locale=C >"$logs/initdb.log" 2>&1
cat >>"$data/postgresql.conf" <<EOF
# benches/migration_lock_time.sh
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = ''
shared_buffers = '$shared_buffers'
max_wal_size = '8GB'
checkpoint_timeout = '30min'
maintenance_work_mem = '256MB'
log_lock_waits = on
log_min_duration_statement = 1000
EOF

# Loading writes no WAL (wal_level minimal, into tables truncated in the same
# transaction); the migrations run at replica, as production does.
start_server() {
    as_server "$pg_bin/pg_ctl" -D "$data" -l "$work/server.log" -w -t 120 \
        -o "$*" start >/dev/null
    started=true
}
stop_server() {
    as_server "$pg_bin/pg_ctl" -D "$data" -m fast -w -t 600 stop >/dev/null
    started=false
}
start_server "-c wal_level=minimal -c max_wal_senders=0"

export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres PGAPPNAME=migbench
sql() { "$pg_bin/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
now() { date +%s.%N; }

# --- The migrations before the measured ones ----------------------------------------------

mapfile -t all_migrations < <(find "$migrations" -mindepth 1 -maxdepth 1 -type d | sort)
before=()
measured=()
for dir in "${all_migrations[@]}"; do
    name=$(basename "$dir")
    version=${name#*-*-*-}
    version=${version%%_*}
    if ((10#$version < from_migration)); then before+=("$dir"); else measured+=("$dir"); fi
done
((${#before[@]} >= 14)) || { echo "expected migrations 000001..000014 at least before the measured ones, found ${#before[@]}" >&2; exit 5; }
((${#measured[@]} >= 1)) || { echo "expected migrations from $from_migration on, found none" >&2; exit 5; }
outside_transaction() {
    [[ -f $1/metadata.toml ]] && grep -Eq '^[[:space:]]*run_in_transaction[[:space:]]*=[[:space:]]*false' "$1/metadata.toml"
}

# Diesel's bookkeeping table, only should a migration refer to it (none does).
if grep -qs '__diesel_schema_migrations' "${before[@]/%//up.sql}" "${measured[@]/%//up.sql}"; then
    sql -c "CREATE TABLE IF NOT EXISTS __diesel_schema_migrations (
                version VARCHAR(50) PRIMARY KEY NOT NULL,
                run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)"
fi

for dir in "${before[@]}"; do
    if outside_transaction "$dir"; then
        sql -f "$dir/up.sql" >>"$logs/migrations-before.log"
    else
        sql -1 -f "$dir/up.sql" >>"$logs/migrations-before.log"
    fi
done
say "migrations before $from_migration applied"

# --- The history --------------------------------------------------------------------------

pending_every=2000     # 1 in 2,000 deliveries waits in the queue
processing_every=100000
failed_every=20        # 5% of the finished ones failed

say "loading $deliveries deliveries over $endpoints endpoints"
load_started=$(now)
with_events=false
if ((from_migration >= 31)); then with_events=true; fi
# Loaded after migration 15 ran (on no endpoints), the history needs the destinations it
# would have made: each endpoint's webhook at position 1, created with the endpoint.
with_destinations=false
if ((from_migration > 15)); then with_destinations=true; fi
sql -v n="$deliveries" -v e="$endpoints" -v pending_every="$pending_every" \
    -v processing_every="$processing_every" -v failed_every="$failed_every" \
    -v with_events="$with_events" -v with_destinations="$with_destinations" <<'SQL'
SET temp_buffers = '1GB';
SET work_mem = '256MB';
BEGIN;
-- Triggers (the terminal counts) and foreign-key checks off: the rows below are
-- consistent by construction, and the counts are filled once at the end.
SET LOCAL session_replication_role = replica;
SET LOCAL synchronous_commit = off;
-- Truncated in this transaction: with wal_level minimal, what follows writes no WAL.
TRUNCATE endpoints, submissions, webhook_deliveries, delivery_attempts,
         delivery_state_counts, delivery_events CASCADE;

INSERT INTO endpoints (id, name, is_active, created_at, webhook_url, webhook_secret)
SELECT 'ep_' || lpad(k::text, 6, '0'), 'Endpoint ' || k, true,
       timestamptz '2025-12-04 00:00:00+00',
       'https://hooks.example.com/forms/ep_' || lpad(k::text, 6, '0'),
       'whsec_' || md5('current' || k) || md5('secret' || k)
FROM generate_series(0, :e - 1) AS k;

\if :with_destinations
INSERT INTO destinations (id, endpoint_id, kind, position, url, secret, created_at)
SELECT 'dst_' || md5(e.id), e.id, 'webhook', 1, e.webhook_url, e.webhook_secret, e.created_at
FROM endpoints e;
\endif

-- A year of history, the oldest first; ids time-ordered as the product makes them (the
-- time in milliseconds, then 20 hex digits, here the row number).
CREATE TEMPORARY TABLE history ON COMMIT DROP AS
SELECT i,
       'ep_' || lpad((i % :e)::text, 6, '0') AS endpoint_id,
       at,
       lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0')
           || lpad(to_hex(i), 20, '0') AS suffix,
       CASE WHEN i % :processing_every = 0 THEN 'processing'
            WHEN i % :pending_every = 0 THEN 'pending'
            WHEN i % :failed_every = 0 THEN 'failed'
            ELSE 'delivered' END AS state
FROM (SELECT i, timestamptz '2025-12-05 00:00:00+00' + i * (interval '365 days' / :n) AS at
      FROM generate_series(1, :n) AS i) g;

-- The fields are what the destinations' migrations carry along; those that partition the
-- history never read submissions, which then hold a short form (less disk, same rows).
INSERT INTO submissions (id, endpoint_id, received_at, fields)
SELECT 'sub_' || suffix, endpoint_id, at,
       CASE WHEN :with_events THEN format('{"n":"%s"}', i)
            ELSE format('{"name":"Person %s","email":"person%s@example.com","message":"Hello, this is submission %s of the benchmark history."}',
                        i, i, i) END::json
FROM history;

INSERT INTO webhook_deliveries
    (id, submission_id, endpoint_id, destination_url, signing_secret, state, attempts,
     cycle_attempts, next_attempt_at, claim_expires_at, claim_token, created_at,
     completed_at)
SELECT 'whd_' || h.suffix, 'sub_' || h.suffix, h.endpoint_id, e.webhook_url, e.webhook_secret,
       h.state,
       CASE WHEN h.state IN ('delivered', 'failed') THEN 1 ELSE 0 END,
       CASE WHEN h.state IN ('delivered', 'failed') THEN 1 ELSE 0 END,
       CASE WHEN h.state = 'pending' THEN now() + (h.i % 3600) * interval '1 second'
            ELSE h.at END,
       CASE WHEN h.state = 'processing' THEN now() + interval '1 hour' END,
       CASE WHEN h.state = 'processing' THEN 'clm_' || md5('claim' || h.i) END,
       h.at,
       CASE WHEN h.state IN ('delivered', 'failed') THEN h.at + interval '1 second' END
FROM history h
JOIN endpoints e ON e.id = h.endpoint_id;

INSERT INTO delivery_attempts
    (id, delivery_id, submission_id, attempt_number, destination_url, attempted_at,
     outcome, response_status, error, duration_ms)
SELECT 'att_' || h.suffix, 'whd_' || h.suffix, 'sub_' || h.suffix, 1,
       'https://hooks.example.com/forms/' || h.endpoint_id, h.at + interval '500 milliseconds',
       CASE WHEN h.state = 'delivered' THEN 'succeeded' ELSE 'http_error' END,
       CASE WHEN h.state = 'delivered' THEN 200 ELSE 503 END,
       CASE WHEN h.state = 'failed' THEN 'the receiver answered 503' END,
       40 + h.i % 400
FROM history h
WHERE h.state IN ('delivered', 'failed');

-- For the migrations that partition the history: each delivery's latest event.
\if :with_events
INSERT INTO delivery_events
    (delivery_id, endpoint_id, kind, state, previous_state, attempts, cycle_attempts,
     outcome, occurred_at)
SELECT 'whd_' || h.suffix, h.endpoint_id,
       CASE WHEN h.state IN ('delivered', 'failed') THEN 'attempt_recorded' ELSE 'created' END,
       CASE WHEN h.state = 'processing' THEN 'pending' ELSE h.state END,
       CASE WHEN h.state IN ('delivered', 'failed') THEN 'processing' END,
       CASE WHEN h.state IN ('delivered', 'failed') THEN 1 ELSE 0 END,
       CASE WHEN h.state IN ('delivered', 'failed') THEN 1 ELSE 0 END,
       CASE WHEN h.state = 'delivered' THEN 'succeeded'
            WHEN h.state = 'failed' THEN 'http_error' END,
       h.at + interval '1 second'
FROM history h
ORDER BY h.i;
\endif

-- As migration 000003 fills them.
INSERT INTO delivery_state_counts (endpoint_id, state, shard, deliveries)
SELECT endpoint_id, state, 0, count(*)
FROM webhook_deliveries
WHERE state IN ('delivered', 'failed')
GROUP BY endpoint_id, state;
COMMIT;
SQL
load_ended=$(now)
say "loaded in $(awk -v a="$load_started" -v b="$load_ended" 'BEGIN { printf "%.0f", b - a }') s; VACUUM ANALYZE"
sql -c 'VACUUM ANALYZE'
vacuum_ended=$(now)
stop_server
start_server ""
sql -c 'CHECKPOINT'
sql -At -F ' ' >"$logs/sizes.txt" <<'SQL'
SELECT c.relname, pg_size_pretty(pg_total_relation_size(c.oid)), c.reltuples::bigint
FROM pg_class c
WHERE c.relname IN ('submissions', 'webhook_deliveries', 'delivery_attempts', 'delivery_events',
                    'endpoints')
ORDER BY 1;
SELECT 'database', pg_size_pretty(pg_database_size(current_database())), NULL;
SELECT 'server', version(), NULL;
SQL
say "history ready: $(tr '\n' ';' <"$logs/sizes.txt")"

# How 000015 plans its data change where it runs it: inside its transaction, after the
# statements before it (a plain EXPLAIN, rolled back, before the writers start).
explain_dir=$(printf '%s\n' "${measured[@]}" | grep -- '-000015_' || true)
explain_update() {
    awk '/^UPDATE webhook_deliveries/ { on = 1 } on { print } on && /;[[:space:]]*$/ { on = 0 }' \
        "$explain_dir/up.sql" | sed "1s/^/EXPLAIN $1 /"
}
if [[ -n $explain_dir ]]; then
    {
        echo 'BEGIN;'
        awk '/^UPDATE webhook_deliveries/ { exit } { print }' "$explain_dir/up.sql"
        explain_update ''
        echo 'ROLLBACK;'
    } | sql -A >"$logs/explain-000015-update-planned.txt" 2>&1 || true
fi

# --- The writers --------------------------------------------------------------------------

sql <<'SQL'
CREATE SCHEMA bench;
-- The run's word to the writers to stop; a table no migration touches.
CREATE TABLE bench.control (stop boolean NOT NULL);
INSERT INTO bench.control VALUES (false);
SQL

# One psql session per writer, fed one transaction after another; each ends itself when
# told, at its deadline, or after its count. Each line it prints: kind, start and end (the
# server's clock, epoch seconds), and whether the transaction failed.
writer_prelude() {
    cat <<EOF
\\set deadline '$(date -u -d "+$writer_max_seconds seconds" '+%Y-%m-%d %H:%M:%S+00')'
\\set pause $(awk -v ms="$writer_pause_ms" 'BEGIN { printf "%.3f", ms / 1000 }')
\\pset format unaligned
\\pset tuples_only on
\\pset fieldsep ' '
\\set endpoints $endpoints
EOF
}
# Before each transaction: stop? and the start time (its own round trip, outside the
# transaction).
writer_check='SELECT (stop OR clock_timestamp() > :'"'"'deadline'"'"'::timestamptz) AS stop, clock_timestamp() AS t0, '"'"'clm_'"'"' || md5(random()::text) AS token FROM bench.control \gset
\if :stop
\q
\endif'
writer_done() {
    echo "SELECT '$1', extract(epoch FROM :'t0'::timestamptz), extract(epoch FROM clock_timestamp()), :'ERROR';"
    echo 'SELECT pg_sleep(:pause) AS slept \gset'
}
# Intake as the previous release writes it: the submission and its delivery (the
# endpoint's webhook, pending, due now) and the delivery's `created` event, in one
# statement.
intake_block() {
    echo "$writer_check"
    cat <<'EOF'
WITH endpoint AS (
    SELECT e.id, e.webhook_url, e.webhook_secret FROM endpoints e
    -- One endpoint at random (a subquery: evaluated once, not per row).
    WHERE e.id = (SELECT 'ep_' || lpad(floor(random() * :endpoints)::int::text, 6, '0'))
    FOR KEY SHARE
), ids AS (
    SELECT lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
           || substr(md5(random()::text), 1, 20) AS suffix
), submission AS (
    INSERT INTO submissions (id, endpoint_id, received_at, fields)
    SELECT 'sub_' || ids.suffix, endpoint.id, statement_timestamp(),
           '{"name":"Writer","email":"writer@example.com","message":"Hello during the migration."}'::json
    FROM endpoint, ids
    RETURNING id, endpoint_id, received_at
), delivery AS (
    INSERT INTO webhook_deliveries
        (id, submission_id, endpoint_id, destination_url, signing_secret, state, attempts,
         cycle_attempts, next_attempt_at, created_at)
    SELECT 'whd_' || ids.suffix, s.id, s.endpoint_id, endpoint.webhook_url,
           endpoint.webhook_secret, 'pending', 0, 0, statement_timestamp(), s.received_at
    FROM submission s, endpoint, ids
    RETURNING id, endpoint_id, state, attempts, cycle_attempts
)
INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, previous_state, attempts,
                             cycle_attempts, outcome, occurred_at)
SELECT id, endpoint_id, 'created', state, NULL, attempts, cycle_attempts, NULL, clock_timestamp()
FROM delivery;
EOF
    writer_done intake
}
# The queue: a pending delivery claimed (a token, a lease, its `claimed` event), then, in
# a transaction of its own, handed back (its `handed_back` event), as a stopping worker
# does.
queue_block() {
    echo "$writer_check"
    cat <<'EOF'
WITH picked AS (
    SELECT w.id FROM webhook_deliveries w
    WHERE w.state = 'pending'
    ORDER BY w.next_attempt_at
    OFFSET floor(random() * 50)::int LIMIT 1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE webhook_deliveries w
    SET state = 'processing', claim_token = :'token',
        claim_expires_at = statement_timestamp() + interval '5 minutes'
    FROM picked WHERE w.id = picked.id
    RETURNING w.id, w.endpoint_id, w.state, w.attempts, w.cycle_attempts
)
INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, previous_state, attempts,
                             cycle_attempts, outcome, occurred_at)
SELECT id, endpoint_id, 'claimed', state, 'pending', attempts, cycle_attempts, NULL, clock_timestamp()
FROM claimed;
EOF
    writer_done claim
    echo "$writer_check" | sed "s/, 'clm_' || md5(random()::text) AS token//"
    cat <<'EOF'
WITH handed_back AS (
    UPDATE webhook_deliveries w
    SET state = 'pending', claim_token = NULL, claim_expires_at = NULL
    WHERE w.state = 'processing' AND w.claim_token = :'token'
    RETURNING w.id, w.endpoint_id, w.state, w.attempts, w.cycle_attempts
)
INSERT INTO delivery_events (delivery_id, endpoint_id, kind, state, previous_state, attempts,
                             cycle_attempts, outcome, occurred_at)
SELECT id, endpoint_id, 'handed_back', state, 'processing', attempts, cycle_attempts, NULL, clock_timestamp()
FROM handed_back;
EOF
    writer_done hand_back
}

start_writer() {
    local kind=$1 block
    block=$("${kind}_block")
    (
        {
            writer_prelude
            for ((i = 0; i < writer_max_transactions; i++)); do
                printf '%s\n' "$block"
            done
        } | PGAPPNAME="migbench-$kind" "$pg_bin/psql" -X -q -v ON_ERROR_STOP=0 \
            >"$logs/writer-$kind.txt" 2>"$logs/writer-$kind.err" || true
    ) &
    writer_pids+=($!)
}

steps_file=$logs/steps.txt
: >"$steps_file"
mark() { printf '%s %s %s\n' "$1" "$2" "$3" >>"$steps_file"; }

start_writer intake
start_writer queue
say "writers started; baseline for $baseline_seconds s"
sleep 2 # the writers' first connections and plans, outside the baseline
baseline_started=$(now)
sleep "$baseline_seconds"
mark baseline "$baseline_started" "$(now)"

# --- Migrations 000015 onwards, as the product applies them -------------------------------

for dir in "${measured[@]}"; do
    name=$(basename "$dir")
    short=${name#*-*-*-}
    in_transaction=true
    if outside_transaction "$dir"; then
        in_transaction=false
    fi
    say "applying $short (in a transaction: $in_transaction)"
    step_started=$(now)
    if $in_transaction; then
        "$pg_bin/psql" -X -v ON_ERROR_STOP=1 -1 -c '\timing on' -f "$dir/up.sql" \
            >"$logs/step-$short.log" 2>&1
    else
        "$pg_bin/psql" -X -v ON_ERROR_STOP=1 -c '\timing on' -f "$dir/up.sql" \
            >"$logs/step-$short.log" 2>&1
    fi || { cat "$logs/step-$short.log" >&2; echo "migration $short failed" >&2; exit 6; }
    mark "$short" "$step_started" "$(now)"
done

tail_started=$(now)
sleep "$tail_seconds"
mark after "$tail_started" "$(now)"
sql -c 'UPDATE bench.control SET stop = true'
for pid in "${writer_pids[@]}"; do wait "$pid" || true; done
writer_pids=()
say "writers stopped"

# How 000015's data change runs on this history once the migrations are done and the
# writers stopped (run again and rolled back; destinations analysed by then).
if [[ -n $explain_dir ]]; then
    {
        echo 'BEGIN;'
        explain_update '(ANALYZE, BUFFERS, COSTS OFF)'
        echo 'ROLLBACK;'
    } | sql -A >"$logs/explain-000015-update.txt" 2>&1 || true
fi

# --- The table --------------------------------------------------------------------------

cat "$logs"/writer-*.txt | awk 'NF == 4' >"$logs/writer.txt"
errors=$(cat "$logs"/writer-*.err | grep -c 'ERROR' || true)

report=$logs/report.txt
sql -At -F '|' >"$report" <<SQL
CREATE TEMPORARY TABLE tx (kind text, t0 float8, t1 float8, failed boolean);
CREATE TEMPORARY TABLE step (position serial, name text, t0 float8, t1 float8);
\\copy tx FROM '$logs/writer.txt' WITH (FORMAT text, DELIMITER ' ')
\\copy step (name, t0, t1) FROM '$steps_file' WITH (FORMAT text, DELIMITER ' ')
WITH per_step AS (
    SELECT s.position, s.name, s.t1 - s.t0 AS wall,
           (SELECT max(t.t1 - t.t0) FROM tx t WHERE t.t0 >= s.t0 AND t.t0 < s.t1) AS max,
           (SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY t.t1 - t.t0)
            FROM tx t WHERE t.t0 >= s.t0 AND t.t0 < s.t1) AS p99,
           (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY t.t1 - t.t0)
            FROM tx t WHERE t.t0 >= s.t0 AND t.t0 < s.t1) AS p50,
           (SELECT count(*) FROM tx t WHERE t.t1 >= s.t0 AND t.t1 < s.t1) AS completed,
           (SELECT count(*) FROM tx t WHERE t.t1 >= s.t0 AND t.t1 < s.t1 AND t.failed) AS failed,
           (SELECT max(t.t1 - t.t0) FILTER (WHERE t.kind = 'intake') FROM tx t
            WHERE t.t0 >= s.t0 AND t.t0 < s.t1) AS intake_max
    FROM step s
), base AS (SELECT * FROM per_step WHERE name = 'baseline')
SELECT p.name,
       to_char(p.wall, 'FM999990.00') || ' s',
       to_char(p.max * 1000, 'FM9999990.0') || ' ms',
       CASE WHEN p.name = 'baseline' THEN '1.0x' ELSE to_char(p.max / b.max, 'FM9999990.0') || 'x' END,
       to_char(p.p99 * 1000, 'FM9999990.0') || ' ms',
       CASE WHEN p.name = 'baseline' THEN '1.0x' ELSE to_char(p.p99 / b.p99, 'FM9999990.0') || 'x' END,
       to_char(p.p50 * 1000, 'FM9999990.00') || ' ms',
       p.completed,
       to_char(p.completed / nullif(p.wall, 0), 'FM99990.0'),
       p.failed
FROM per_step p, base b
ORDER BY p.position;
SQL

{
    echo
    echo "Migrations from $from_migration on: $deliveries deliveries, $endpoints endpoints ($(sed -n 's/^server //p' "$logs/sizes.txt" | cut -d' ' -f1-2))"
    echo "history: $(grep -v '^server' "$logs/sizes.txt" | tr '\n' ';' | sed 's/;$//')"
    echo "loaded in $(awk -v a="$load_started" -v b="$load_ended" 'BEGIN { printf "%.0f", b - a }') s, vacuumed and analysed in $(awk -v a="$load_ended" -v b="$vacuum_ended" 'BEGIN { printf "%.0f", b - a }') s"
    echo "writers: intake, claim, hand-back, one connection each for intake and for the queue, $writer_pause_ms ms apart; latency of the transactions that started in the step; completed = ended in the step"
    echo
    {
        echo "step|wall|writer max|max/baseline|writer p99|p99/baseline|writer p50|completed|per s|failed"
        cat "$report"
    } | column -t -s '|'
    echo
    echo "writer errors: $errors"
    echo
    echo "statements of 100 ms or more:"
    for dir in "${measured[@]}"; do
        short=$(basename "$dir")
        short=${short#*-*-*-}
        awk -v step="$short" '
            /^Time: / { ms = $2 + 0; if (ms >= 100) printf "  %-40s %-32s %10.1f ms\n", step, tag, ms; next }
            NF > 0 { tag = $0 }
        ' "$logs/step-$short.log"
    done
    if [[ -s $logs/explain-000015-update-planned.txt ]]; then
        echo
        echo "000015's UPDATE of the queue as planned inside the migration (EXPLAIN before the run, rolled back):"
        grep -v '^QUERY PLAN\|^(.* rows)$\|^$' "$logs/explain-000015-update-planned.txt" | sed 's/^/  /'
    fi
    if [[ -s $logs/explain-000015-update.txt ]]; then
        echo
        echo "000015's UPDATE of the queue, run again after the migrations (rolled back):"
        grep -v '^QUERY PLAN\|^(.* rows)$\|^$' "$logs/explain-000015-update.txt" | sed 's/^/  /'
    fi
} | tee "$logs/summary.txt"
