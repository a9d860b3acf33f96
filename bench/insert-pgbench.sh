#!/usr/bin/env bash
# insert-pgbench.sh: what an outbox INSERT costs a producer's transaction,
# measured with pgbench (a C client: less client CPU beside the server than
# the Go benchmark's item 4b) against the same row into a table with only a
# primary key. 8 clients, one INSERT per transaction (prepared), rounds of
# SECONDS interleaved (plain, leased, untriggered, unordered, enqueue (the
# unordered row through the OutboxEnqueue statement, wake-up included), ordered over
# distinct aggregates, ordered into one hot aggregate, and the WAL-flush
# bound: one session inserting plain rows, each commit waiting for its own
# flush, as a hot aggregate's commits must), CHECKPOINT before each;
# prints every round and the medians: transactions per second, the ratio to
# the plain round of the same round, WAL bytes per transaction, and the
# server's CPU per transaction (the backends' CPU time, read from the
# postmaster's children's times in /proc: run it on the database host).
#
# Two reference tables show where the difference to a plain insert goes:
# - leased: the smallest table a leased queue needs (the lease and fencing
#   columns: status with its CHECK, attempts, available_at, lease_owner,
#   lease_until, lease_version) and one partial index for its claim; no
#   triggers. What any outbox with leases and fencing pays.
# - untriggered: outbox's own columns, CHECK constraint and indexes
#   (CREATE TABLE ... (LIKE outbox INCLUDING ALL)), without its triggers
#   (commit order, wake-up). Against leased: the cost of the columns and
#   indexes of ordering, the claim lanes and monitoring; against unordered:
#   the triggers'.
#
#   [BEFORE_URL=postgres://…/scratch_before] bench/insert-pgbench.sh postgres://postgres@127.0.0.1:5432/scratch [ROUNDS] [SECONDS]
#
# BEFORE_URL (optional): a second scratch database on the same server whose
# outbox is at an earlier migration (pgoutbox migrate up, then
# pgoutbox migrate down --to N): each round then also inserts into it
# (unordered-before, ordered-before, hot-before), so a schema change is measured before
# and after in one run.
#
# The database must be a scratch one with the pgoutbox migrations applied
# (pgoutbox migrate up): the script empties outbox and creates and empties
# bench_insert_plain, bench_insert_leased and bench_insert_untriggered. No
# relay may run against it: producers then queue no wake-up, as while
# relays are busy claiming.
set -euo pipefail
url=${1:?usage: insert-pgbench.sh DATABASE_URL [ROUNDS] [SECONDS]}
rounds=${2:-5}
secs=${3:-5}
psql=(psql "$url" -qtAX -v ON_ERROR_STOP=1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"${psql[@]}" -c "SET client_min_messages = warning" -c "CREATE TABLE IF NOT EXISTS bench_insert_plain (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, aggregate_type text NOT NULL,
    aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now())" -c "CREATE TABLE IF NOT EXISTS bench_insert_leased (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, aggregate_type text NOT NULL,
    aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'done', 'dead')),
    available_at timestamptz NOT NULL DEFAULT now(), attempts integer NOT NULL DEFAULT 0,
    lease_owner text, lease_until timestamptz, lease_version bigint NOT NULL DEFAULT 0)" \
	-c "CREATE INDEX IF NOT EXISTS bench_insert_leased_pending ON bench_insert_leased (available_at, id) WHERE status = 'pending'" \
	-c "DROP TABLE IF EXISTS bench_insert_untriggered" -c "CREATE TABLE bench_insert_untriggered (LIKE outbox INCLUDING ALL)" >/dev/null
for t in plain leased; do
	cat >"$tmp/$t.sql" <<SQL
\\set a random(1, 100)
INSERT INTO bench_insert_$t (aggregate_type, aggregate_id, event_type, payload) VALUES ('bench', 'p' || :client_id || '-' || :a, 'benchmark', '{"num":1}');
SQL
done
cat >"$tmp/untriggered.sql" <<'SQL'
\set a random(1, 100)
INSERT INTO bench_insert_untriggered (aggregate_type, aggregate_id, event_type, payload, ordered) VALUES ('bench', 'p' || :client_id || '-' || :a, 'benchmark', '{"num":1}', false);
SQL
for o in false true; do
	cat >"$tmp/$o.sql" <<SQL
\\set a random(1, 100)
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered) VALUES ('bench', 'p' || :client_id || '-' || :a, 'benchmark', '{"num":1}', $o);
SQL
done
# enqueue: the statement dispatcher.Enqueue runs (OutboxEnqueue,
# queries/enqueue.sql), with its wake-up in the WHERE clause.
cat >"$tmp/enqueue.sql" <<'SQL'
\set a random(1, 100)
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers, ordered, available_at)
SELECT 'bench', 'p' || :client_id || '-' || :a, 'benchmark', '{"num":1}'::jsonb, '{}'::jsonb, false, now()
 WHERE current_setting('outbox.wake_queued', true) IS NOT DISTINCT FROM 'on'
    OR pg_try_advisory_xact_lock_shared(('outbox'::regclass)::oid::integer, 1869968485)
    OR NOT pg_try_advisory_xact_lock(('outbox'::regclass)::oid::integer, 1869968482)
    OR EXISTS (SELECT FROM pg_notify('outbox', ''));
SQL
cat >"$tmp/hot.sql" <<'SQL'
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, ordered) VALUES ('bench', 'hot', 'benchmark', '{"num":1}', true);
SQL
postmaster=$("${psql[@]}" -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'" | xargs ps -o ppid= -p | tr -d ' ')
hz=$(getconf CLK_TCK)
children() { awk '{print $16 + $17}' "/proc/$postmaster/stat"; }

# round TABLE SCRIPT [CLIENTS [URL]] -> "tx/s WAL/tx cpu-us/tx"
round() {
	psql "${4:-$url}" -qtAX -v ON_ERROR_STOP=1 -c "TRUNCATE $1" -c "VACUUM ANALYZE $1" -c "CHECKPOINT"
	local l0 l1 c0 c1 out n tps
	sleep 1
	c0=$(children)
	l0=$("${psql[@]}" -c "SELECT pg_current_wal_lsn()")
	out=$(pgbench -n -M prepared -c "${3:-8}" -j "$(( ${3:-8} < 2 ? 1 : 2 ))" -T "$secs" -f "$2" "${4:-$url}" 2>&1)
	sleep 1 # the postmaster collects the backends' times once they exit
	c1=$(children)
	l1=$("${psql[@]}" -c "SELECT pg_current_wal_lsn()")
	n=$(awk '/number of transactions actually processed/ {split($6, a, "/"); print a[1]}' <<<"$out")
	tps=$(awk '/^tps/ {print $3}' <<<"$out")
	"${psql[@]}" -c "SELECT round($tps), round(pg_wal_lsn_diff('$l1', '$l0') / $n), round(($c1 - $c0) * 1000000.0 / $hz / $n)" | tr '|' ' '
}

cases="leased untriggered unordered enqueue ordered hot flush-bound"
if [ -n "${BEFORE_URL:-}" ]; then
	cases="leased untriggered unordered-before unordered enqueue ordered-before ordered hot-before hot flush-bound"
	psql "$BEFORE_URL" -qtAX -v ON_ERROR_STOP=1 -c "SELECT 1 FROM outbox LIMIT 0" >/dev/null
fi
printf '%-6s %-16s %8s %7s %8s %12s\n' round case 'tx/s' 'vs plain' 'WAL B/tx' 'server us/tx'
for r in $(seq "$rounds"); do
	read -r ptps pwal pcpu < <(round bench_insert_plain "$tmp/plain.sql")
	printf '%-6s %-16s %8s %7s %8s %12s\n' "$r" plain "$ptps" 1.00 "$pwal" "$pcpu"
	echo "plain $ptps 1 $pwal $pcpu" >>"$tmp/all"
	for name in $cases; do
		clients=8 on=$url
		case $name in
		unordered-before) table=outbox script=$tmp/false.sql on=$BEFORE_URL ;;
		ordered-before) table=outbox script=$tmp/true.sql on=$BEFORE_URL ;;
		hot-before) table=outbox script=$tmp/hot.sql on=$BEFORE_URL ;;
		leased | untriggered) table=bench_insert_$name script=$tmp/$name.sql ;;
		unordered) table=outbox script=$tmp/false.sql ;;
		enqueue) table=outbox script=$tmp/enqueue.sql ;;
		ordered) table=outbox script=$tmp/true.sql ;;
		hot) table=outbox script=$tmp/hot.sql ;;
		flush-bound) table=bench_insert_plain script=$tmp/plain.sql clients=1 ;;
		esac
		read -r tps wal cpu < <(round "$table" "$script" "$clients" "$on")
		ratio=$(awk -v a="$tps" -v b="$ptps" 'BEGIN {printf "%.2f", a / b}')
		printf '%-6s %-16s %8s %7s %8s %12s\n' "$r" "$name" "$tps" "$ratio" "$wal" "$cpu"
		echo "$name $tps $ratio $wal $cpu" >>"$tmp/all"
	done
done
"${psql[@]}" -c "TRUNCATE outbox, bench_insert_plain, bench_insert_leased" -c "DROP TABLE bench_insert_untriggered"
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "medians of $rounds rounds:"
[ -n "${BEFORE_URL:-}" ] && psql "$BEFORE_URL" -qtAX -c "TRUNCATE outbox"
for c in plain $cases; do
	printf '%-6s %-16s %8s %7s %8s %12s\n' median "$c" \
		"$(awk -v c=$c '$1 == c {print $2}' "$tmp/all" | median)" \
		"$(awk -v c=$c '$1 == c {print $3}' "$tmp/all" | median)" \
		"$(awk -v c=$c '$1 == c {print $4}' "$tmp/all" | median)" \
		"$(awk -v c=$c '$1 == c {print $5}' "$tmp/all" | median)"
done
hot=$(awk '$1 == "hot" {print $2}' "$tmp/all" | median)
bound=$(awk '$1 == "flush-bound" {print $2}' "$tmp/all" | median)
awk -v h="$hot" -v b="$bound" 'BEGIN {printf "one hot aggregate: %d tx/s, %.0f%% of the WAL-flush bound (one session, plain inserts: %d tx/s)\n", h, 100 * h / b, b}'
if [ -n "${BEFORE_URL:-}" ]; then
	hotb=$(awk '$1 == "hot-before" {print $2}' "$tmp/all" | median)
	awk -v h="$hotb" -v b="$bound" 'BEGIN {printf "one hot aggregate before: %d tx/s, %.0f%% of the WAL-flush bound\n", h, 100 * h / b}'
fi
