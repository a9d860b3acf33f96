#!/usr/bin/env bash
# insert-cpu.sh: the server CPU one producer transaction costs, per kind of
# INSERT, read from the backend's own CPU clock (/proc/PID/stat), so load
# elsewhere on the machine moves it far less than a rate would.
#
#   bench/insert-cpu.sh postgres://postgres@127.0.0.1:5432/scratch [N]
#
# The database must be a scratch one with the pgoutbox migrations applied
# (pgoutbox migrate up): the script empties outbox, creates the table
# bench_insert_plain, and, as the table's owner, switches the outbox's
# insert trigger (commit order) off and on again to show what it costs. It must run on
# the database server's host (it reads the backend's /proc entry). Each
# case runs N one-row transactions (default 20,000; ordered: N/2) in one
# session, in a DO block that commits after every INSERT, with
# synchronous_commit off: no network round trip, no parse, no WAL flush wait
# is counted, only what the server spends on the statement and its COMMIT.
set -euo pipefail
url=${1:?usage: insert-cpu.sh DATABASE_URL [N]}
n=${2:-20000}
psql=(psql "$url" -qtAX -v ON_ERROR_STOP=1)

"${psql[@]}" -c "SET client_min_messages = warning" -c "CREATE TABLE IF NOT EXISTS bench_insert_plain (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, aggregate_type text NOT NULL,
    aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now())" >/dev/null

# run LABEL TABLE ORDERED COUNT
run() {
	local cols="aggregate_type, aggregate_id, event_type, payload" vals="'bench', 'a' || (i % 1000), 'benchmark', '{\"num\":1}'"
	local table=$2 where=
	if [ "$2" = enqueue ]; then
		# the OutboxEnqueue statement's form: its wake-up in the WHERE clause
		table=outbox where="WHERE current_setting('outbox.wake_queued', true) IS NOT DISTINCT FROM 'on' OR pg_try_advisory_xact_lock_shared(('outbox'::regclass)::oid::integer, 1869968485) OR NOT pg_try_advisory_xact_lock(('outbox'::regclass)::oid::integer, 1869968482) OR EXISTS (SELECT FROM pg_notify('outbox', ''))"
	fi
	if [ "$table" = outbox ]; then cols="$cols, ordered" vals="$vals, $3"; fi
	"${psql[@]}" <<SQL
SET synchronous_commit = off;
TRUNCATE $table;
SELECT pg_backend_pid() AS pid \gset
\setenv PGPID :pid
SELECT 1 \g /dev/null
\! awk '{print \$14 + \$15}' /proc/\$PGPID/stat > "\${TMPDIR:-/tmp}/insert-cpu.\$PGPID"
DO \$\$ BEGIN FOR i IN 1..$4 LOOP INSERT INTO $table ($cols) SELECT $vals $where; COMMIT; END LOOP; END \$\$;
\! awk -v l="$1" -v n=$4 -v hz="\$(getconf CLK_TCK)" -v f="\${TMPDIR:-/tmp}/insert-cpu.\$PGPID" '{getline c0 < f; printf "%-44s %6.1f us of server CPU per transaction\n", l, (\$14 + \$15 - c0) * 1000000 / hz / n}' /proc/\$PGPID/stat
\! rm -f "\${TMPDIR:-/tmp}/insert-cpu.\$PGPID"
SQL
}

triggers() { "${psql[@]}" -c "ALTER TABLE outbox $1 TRIGGER outbox_commit_order" >/dev/null; }
trap 'triggers ENABLE' EXIT

run "plain table, primary key only" bench_insert_plain false "$n"
run "outbox, unordered" outbox false "$n"
run "outbox, unordered, OutboxEnqueue (wake-up)" enqueue false "$n"
run "outbox, ordered" outbox true $((n / 2))
triggers DISABLE
run "outbox, unordered, insert trigger off" outbox false "$n"
run "outbox, ordered, insert trigger off" outbox true $((n / 2))
triggers ENABLE
"${psql[@]}" -c "TRUNCATE outbox" >/dev/null
