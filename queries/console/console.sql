-- Web console (package console, `pgoutbox ui`). Pages must stay fast with
-- millions of retained done rows: nothing here counts or scans done rows
-- without a bound (at most @cap of them, or those delivered in the charted
-- minutes). Undelivered rows (pending, processing, dead) are counted
-- through their partial indexes with a cap; done rows are estimated from
-- pg_class.reltuples; every list is a keyset page over an index, read from a
-- window of at most @scan_rows index entries so a selective filter can never
-- turn a page into a scan of the table.
-- Reads take no locks. Writes are single UPDATEs by primary key (ANY of an
-- id array), guarded by the status they expect, and return the ids they
-- changed: an id missing from the result was not in that status any more
-- (someone else acted first), and nothing happened to it.
-- Callers run these with a custom plan per execution (pgx
-- QueryExecModeExec): the optional filters (sqlc.narg ... IS NULL OR ...)
-- would otherwise get a generic plan that ignores which filters are set.

-- OutboxConsoleStatusCounts: messages by status, each count stopping at
-- @cap rows, done rows at @done_cap (the page shows "cap+" when a count
-- reached it; below the cap a count is exact; done rows beyond theirs are
-- estimated, see below: they are the retained history, millions, and each
-- entry counted costs the same whether the page then shows it or not), the
-- age in seconds of the oldest undelivered (pending or processing) message
-- (0 when there is none), and the planner's estimate of all rows
-- (pg_class.reltuples, -1 when the table has never been analyzed), from
-- which the page estimates the done rows. All times on the database clock.
-- The oldest age is the figure of OutboxOldestPendingAge, read with bounded
-- work and from the scans the counts make anyway: unordered pending rows are
-- taken as the first @lowest_ids entries of outbox_pending_txid in (txid, id)
-- order (a transaction gets its txid when it first writes, and created_at
-- is when it began, so the oldest is among them unless a producer's
-- transaction stayed open while @lowest_ids newer rows were inserted) and
-- the first @lowest_ids unordered entries of outbox_due in (available_at,
-- id) order: a message made pending again (a retry, a defer, a redrive)
-- carries a new txid but keeps its created_at, and its available_at lies
-- after its created_at, so it is in that index (with more than @lowest_ids
-- messages in backoff or scheduled for later, an older one among the rest
-- is missed; the ordered heads that index also holds are skipped on their
-- table rows, as few as the ordered heads waiting for a retry);
-- ordered pending rows are counted and aged in one pass over
-- outbox_ordered_head alone (status and created_at are INCLUDE columns,
-- 00006; an unsequenced ordered row is uncommitted and invisible anyway),
-- so above @cap of them the age is that of the oldest among the first @cap
-- in (aggregate_id, seq) order; processing rows in one pass over
-- outbox_leased and their table rows (bounded by what relays hold).
-- Indexes: outbox_pending_txid (pending unordered: the count, index only,
-- and the first entries), outbox_due (its first unordered entries; 00017),
-- outbox_ordered_head, outbox_leased,
-- outbox_dead (dead, count, index only), outbox_finished (00017: its
-- skipped part for the skipped count, at most @cap entries, and its done
-- part for the done count, at most @done_cap entries, index only where
-- the visibility map allows).
-- Lock strategy: none (a read; no row locks). Always one row.
-- name: OutboxConsoleStatusCounts :one
WITH unordered AS (
    SELECT count(*) AS n
      FROM (SELECT 1 FROM outbox WHERE status = 'pending' AND NOT ordered LIMIT @cap::integer) AS p
), unordered_oldest AS (
    SELECT least((SELECT min(p.created_at)
                    FROM (SELECT created_at
                            FROM outbox
                           WHERE status = 'pending' AND NOT ordered
                           ORDER BY txid, id
                           LIMIT @lowest_ids::integer) AS p),
                 (SELECT min(d.created_at)
                    FROM (SELECT created_at
                            FROM outbox
                           WHERE status = 'pending' AND NOT ordered AND available_at > created_at
                           ORDER BY available_at, id
                           LIMIT @lowest_ids::integer) AS d)) AS oldest
), ordered AS (
    SELECT count(*) AS n, min(p.created_at) AS oldest
      FROM (SELECT created_at FROM outbox WHERE status = 'pending' AND ordered AND seq IS NOT NULL LIMIT @cap::integer) AS p
), processing AS (
    SELECT count(*) AS n, min(l.created_at) AS oldest
      FROM (SELECT created_at FROM outbox WHERE status = 'processing' LIMIT @cap::integer) AS l
)
SELECT ((SELECT n FROM unordered) + (SELECT n FROM ordered))::bigint AS pending,
       (SELECT n FROM processing)::bigint AS processing,
       (SELECT count(*) FROM (SELECT 1 FROM outbox WHERE status = 'dead' LIMIT @cap::integer) AS d)::bigint AS dead,
       (SELECT count(*) FROM (SELECT 1 FROM outbox WHERE status = 'done' LIMIT @done_cap::integer) AS d)::bigint AS done,
       (SELECT count(*) FROM (SELECT 1 FROM outbox WHERE status = 'skipped' LIMIT @cap::integer) AS k)::bigint AS skipped,
       coalesce(extract(epoch FROM now() - least((SELECT oldest FROM unordered_oldest), (SELECT oldest FROM ordered),
                                                (SELECT oldest FROM processing))), 0)::float8 AS oldest_age_seconds,
       coalesce((SELECT c.reltuples FROM pg_catalog.pg_class AS c WHERE c.oid = to_regclass('outbox')), -1)::float8 AS estimated_rows;

-- OutboxConsoleDeliveredPerMinute: deliveries of the last @minutes minutes,
-- one row per minute (oldest first; the last row is the current, partial
-- minute), for the throughput and end-to-end latency charts and the fleet
-- overview's rate. delivered is exact and read from counters, not counted
-- from the done rows: the sum of the minute's rows of outbox_delivered
-- (migration 00018), which pgoutbox's statements change in the same
-- statement as every row they make enter or leave 'done' (a finalize, a
-- redelivery, a purge), so it equals the number of done
-- rows whose done_at falls in the minute (status 'done' only: a skipped
-- message was never delivered); a bar is the minute's true average rate
-- whenever in the minute the deliveries came. The latency figures
-- (done_at - created_at, milliseconds) describe a sample: the first
-- @latency_sample deliveries of the minute in done_at order (all of them
-- below that; sampled says how many). All times on the database clock.
-- Latency is float8 (date_part): extract returns numeric, whose arithmetic
-- and sort made the percentiles cost twice the time.
-- The minutes come from an integer series, whose row count the planner
-- knows (a timestamp series is estimated at 1,000 rows). Callers run it with
-- jit off (SET LOCAL), as it was when it counted every delivery.
-- Cost: one primary-key range scan of outbox_delivered per minute (a row
-- per connection that delivered in it) and one bounded index range scan for
-- the sample (at most @latency_sample entries, index only where the
-- visibility map allows): it grows neither with the deliveries of the hour
-- nor with the retained done rows; measured in docs/console/README.md.
-- Index: outbox_delivered_pkey (minute, backend); outbox_finished (its
-- done part, in done_at order, INCLUDE created_at; migration 00017) for the
-- sample.
-- Lock strategy: none (a read; no row locks).
-- name: OutboxConsoleDeliveredPerMinute :many
WITH b AS (
    SELECT date_trunc('minute', now()) - make_interval(mins => n) AS minute
      FROM generate_series(greatest(@minutes::integer, 1) - 1, 0, -1) AS n
)
SELECT b.minute::timestamptz AS minute,
       (SELECT coalesce(sum(c.delivered), 0)
          FROM outbox_delivered AS c
         WHERE c.minute = b.minute)::bigint AS delivered,
       s.sampled::bigint AS sampled,
       s.p50_ms,
       s.p99_ms,
       s.max_ms
  FROM b
 CROSS JOIN LATERAL (
        SELECT count(*) AS sampled,
               coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY d.latency_ms), 0)::float8 AS p50_ms,
               coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY d.latency_ms), 0)::float8 AS p99_ms,
               coalesce(max(d.latency_ms), 0)::float8 AS max_ms
          FROM (SELECT date_part('epoch', o.done_at - o.created_at) * 1000 AS latency_ms
                  FROM outbox AS o
                 WHERE o.status = 'done'
                   AND o.done_at >= b.minute
                   AND o.done_at < b.minute + interval '1 minute'
                 ORDER BY o.done_at
                 LIMIT @latency_sample::integer) AS d
       ) AS s
 ORDER BY b.minute;

-- OutboxConsoleNow: the database clock, which every age on the pages uses.
-- No table read.
-- Lock strategy: none (a read; no row locks). Always one row.
-- name: OutboxConsoleNow :one
SELECT now()::timestamptz AS now;

-- OutboxConsoleIDRange: a time range as a range of ids, [min_id, before_id),
-- in one round trip: min_id is the first id created at or after
-- @created_from (0 when @created_from is NULL), before_id the first id
-- created at or after @created_to (9223372036854775807 when NULL); both are
-- one past the highest id when no row is that new. Ids follow insertion
-- order, so created_at grows with id up to the length of the producers'
-- transactions (callers widen the range by a slack and keep the exact
-- created_at filter). Each bound is a binary search over the id range
-- (lowest to highest id, one entry from each end), one probe per step: the
-- first row at or after the middle id. About log2(rows) probes each, 24 for
-- 10 million rows, 3-4 index pages per probe.
-- Index: the primary key (point probes only).
-- Lock strategy: none (a read; no row locks).
-- name: OutboxConsoleIDRange :one
WITH RECURSIVE bounds AS (
    SELECT coalesce((SELECT id FROM outbox ORDER BY id LIMIT 1), 0)::bigint AS low,
           coalesce((SELECT id FROM outbox ORDER BY id DESC LIMIT 1), 0)::bigint AS high
), search (bound, t, lo, hi) AS (
    SELECT 'from'::text, sqlc.narg('created_from')::timestamptz, b.low, b.high + 1
      FROM bounds AS b
     WHERE sqlc.narg('created_from')::timestamptz IS NOT NULL
    UNION ALL
    SELECT 'to'::text, sqlc.narg('created_to')::timestamptz, b.low, b.high + 1
      FROM bounds AS b
     WHERE sqlc.narg('created_to')::timestamptz IS NOT NULL
    UNION ALL
    -- One step: probe the middle; a row older than t moves lo past it,
    -- anything else (a newer row, or no row) moves hi down to the middle.
    SELECT s.bound, s.t,
           CASE WHEN p.created_at < s.t THEN p.id + 1 ELSE s.lo END,
           CASE WHEN p.created_at < s.t THEN s.hi ELSE s.lo + (s.hi - s.lo) / 2 END
      FROM search AS s
      LEFT JOIN LATERAL (
            SELECT o.id, o.created_at
              FROM outbox AS o
             WHERE o.id >= s.lo + (s.hi - s.lo) / 2
             ORDER BY o.id
             LIMIT 1) AS p ON true
     WHERE s.lo < s.hi
)
SELECT coalesce((SELECT s.lo FROM search AS s WHERE s.bound = 'from' AND s.lo >= s.hi), 0)::bigint AS min_id,
       coalesce((SELECT s.lo FROM search AS s WHERE s.bound = 'to' AND s.lo >= s.hi), 9223372036854775807)::bigint AS before_id;

-- OutboxConsoleMessages: one page of messages, newest first, keyset-paged
-- by id: rows with @min_id <= id < @before_id, filtered, at most @page_rows.
-- The filters apply within a window of the @scan_rows highest ids of that
-- range; when the page is not full, OutboxConsoleScanWindow says where the
-- window ended and the next page continues from there. So a page reads at
-- most @scan_rows rows whatever the filters.
-- Index: the primary key (backward range scan, bounded by @scan_rows).
-- Lock strategy: none (a read; no row locks).
-- No rows: nothing in the window that matches (see OutboxConsoleScanWindow).
-- name: OutboxConsoleMessages :many
SELECT w.id, w.aggregate_type, w.aggregate_id, w.event_type, w.status, w.attempts,
       w.created_at, w.available_at, w.done_at, w.ordered, w.lease_owner, w.last_error
  FROM (SELECT o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.status, o.attempts,
               o.created_at, o.available_at, o.done_at, o.ordered, o.lease_owner, o.last_error
          FROM outbox AS o
         WHERE o.id < @before_id::bigint
           AND o.id >= @min_id::bigint
         ORDER BY o.id DESC
         LIMIT @scan_rows::integer) AS w
 WHERE (sqlc.narg('status')::text IS NULL OR w.status = sqlc.narg('status')::text)
   AND (sqlc.narg('event_type')::text IS NULL OR w.event_type = sqlc.narg('event_type')::text)
   AND (sqlc.narg('aggregate_type')::text IS NULL OR w.aggregate_type = sqlc.narg('aggregate_type')::text)
   AND (sqlc.narg('aggregate_id')::text IS NULL OR w.aggregate_id = sqlc.narg('aggregate_id')::text)
   AND (sqlc.narg('created_from')::timestamptz IS NULL OR w.created_at >= sqlc.narg('created_from')::timestamptz)
   AND (sqlc.narg('created_to')::timestamptz IS NULL OR w.created_at < sqlc.narg('created_to')::timestamptz)
 ORDER BY w.id DESC
 LIMIT @page_rows::integer;

-- OutboxConsoleScanWindow: where OutboxConsoleMessages' window ended: the
-- lowest id among the @scan_rows highest ids in @min_id <= id < @before_id,
-- and how many ids the window held (fewer than @scan_rows: the range is
-- exhausted). 0, 0: nothing in the range.
-- Index: the primary key (index-only backward range scan).
-- Lock strategy: none (a read; no row locks).
-- name: OutboxConsoleScanWindow :one
SELECT coalesce(min(w.id), 0)::bigint AS lowest_id, count(*) AS scanned
  FROM (SELECT o.id
          FROM outbox AS o
         WHERE o.id < @before_id::bigint
           AND o.id >= @min_id::bigint
         ORDER BY o.id DESC
         LIMIT @scan_rows::integer) AS w;

-- OutboxConsoleMessage: one message with everything the detail page shows.
-- No row: no such id (purged, or never existed).
-- Index: the primary key.
-- Lock strategy: none (a read; no row locks).
-- name: OutboxConsoleMessage :one
SELECT id, aggregate_type, aggregate_id, event_type, payload, headers, status, attempts,
       last_error, lease_owner, lease_until, lease_version, created_at, available_at,
       done_at, ordered, seq
  FROM outbox
 WHERE id = @id::bigint;

-- OutboxConsoleDead: one page of dead messages, newest first, keyset-paged
-- by id (@min_id <= id < @before_id), filtered within a window of the
-- @scan_rows highest dead ids of that range, as OutboxConsoleMessages does
-- (OutboxConsoleDeadWindow says where the window ended). The window and the
-- filters read outbox_dead alone (the filter columns are INCLUDE columns,
-- migration 00006); only the @page_rows rows shown are read from the table.
-- Index: outbox_dead (backward range scan, bounded by @scan_rows), then the
-- primary key for at most @page_rows rows.
-- Lock strategy: none (a read; no row locks).
-- No rows: no dead message in the window that matches.
-- name: OutboxConsoleDead :many
SELECT o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.attempts, o.last_error,
       o.created_at, o.ordered
  FROM (SELECT w.id
          FROM (SELECT d.id, d.event_type, d.aggregate_type, d.aggregate_id, d.created_at
                  FROM outbox AS d
                 WHERE d.status = 'dead'
                   AND d.id < @before_id::bigint
                   AND d.id >= @min_id::bigint
                 ORDER BY d.id DESC
                 LIMIT @scan_rows::integer) AS w
         WHERE (sqlc.narg('event_type')::text IS NULL OR w.event_type = sqlc.narg('event_type')::text)
           AND (sqlc.narg('aggregate_type')::text IS NULL OR w.aggregate_type = sqlc.narg('aggregate_type')::text)
           AND (sqlc.narg('aggregate_id')::text IS NULL OR w.aggregate_id = sqlc.narg('aggregate_id')::text)
           AND (sqlc.narg('created_from')::timestamptz IS NULL OR w.created_at >= sqlc.narg('created_from')::timestamptz)
           AND (sqlc.narg('created_to')::timestamptz IS NULL OR w.created_at < sqlc.narg('created_to')::timestamptz)
         ORDER BY w.id DESC
         LIMIT @page_rows::integer) AS p
  JOIN outbox AS o ON o.id = p.id
 ORDER BY o.id DESC;

-- OutboxConsoleDeadWindow: where OutboxConsoleDead's window ended (lowest
-- id, and how many dead ids it held). 0, 0: no dead row in the range.
-- Index: outbox_dead (index-only backward range scan).
-- Lock strategy: none (a read; no row locks). Always one row.
-- name: OutboxConsoleDeadWindow :one
SELECT coalesce(min(w.id), 0)::bigint AS lowest_id, count(*) AS scanned
  FROM (SELECT o.id
          FROM outbox AS o
         WHERE o.status = 'dead'
           AND o.id < @before_id::bigint
           AND o.id >= @min_id::bigint
         ORDER BY o.id DESC
         LIMIT @scan_rows::integer) AS w;

-- OutboxConsoleDeadMatching: for "all dead messages matching this filter":
-- how many dead messages with @min_id <= id <= @max_id match (stopping at
-- @cap), and the highest such id. The confirmation page lists the ids the
-- action will change (OutboxConsoleDeadIDs) and, when more match than it
-- lists, says how many.
-- Index: outbox_dead alone (the filter columns are INCLUDE columns,
-- migration 00006): every dead entry of the id range is read, at most @cap
-- of them matching; the dead list is the working set, not the done rows.
-- Lock strategy: none (a read; no row locks).
-- name: OutboxConsoleDeadMatching :one
SELECT count(*) AS matching, coalesce(max(m.id), 0)::bigint AS highest_id
  FROM (SELECT o.id
          FROM outbox AS o
         WHERE o.status = 'dead'
           AND o.id >= @min_id::bigint
           AND o.id <= @max_id::bigint
           AND (sqlc.narg('event_type')::text IS NULL OR o.event_type = sqlc.narg('event_type')::text)
           AND (sqlc.narg('aggregate_type')::text IS NULL OR o.aggregate_type = sqlc.narg('aggregate_type')::text)
           AND (sqlc.narg('aggregate_id')::text IS NULL OR o.aggregate_id = sqlc.narg('aggregate_id')::text)
           AND (sqlc.narg('created_from')::timestamptz IS NULL OR o.created_at >= sqlc.narg('created_from')::timestamptz)
           AND (sqlc.narg('created_to')::timestamptz IS NULL OR o.created_at < sqlc.narg('created_to')::timestamptz)
         ORDER BY o.id
         LIMIT @cap::integer) AS m;

-- OutboxConsoleDeadIDs: the next @max_rows ids of dead messages matching
-- the filter with @after_id < id <= @max_id, ascending: the set a
-- confirmation of a bulk action over a filter lists, and the action then
-- changes exactly those ids.
-- Index: outbox_dead alone (forward range scan; INCLUDE columns, 00006).
-- Lock strategy: none (a read; no row locks).
-- No rows: no more matching dead message up to @max_id.
-- name: OutboxConsoleDeadIDs :many
SELECT o.id
  FROM outbox AS o
 WHERE o.status = 'dead'
   AND o.id > @after_id::bigint
   AND o.id <= @max_id::bigint
   AND (sqlc.narg('event_type')::text IS NULL OR o.event_type = sqlc.narg('event_type')::text)
   AND (sqlc.narg('aggregate_type')::text IS NULL OR o.aggregate_type = sqlc.narg('aggregate_type')::text)
   AND (sqlc.narg('aggregate_id')::text IS NULL OR o.aggregate_id = sqlc.narg('aggregate_id')::text)
   AND (sqlc.narg('created_from')::timestamptz IS NULL OR o.created_at >= sqlc.narg('created_from')::timestamptz)
   AND (sqlc.narg('created_to')::timestamptz IS NULL OR o.created_at < sqlc.narg('created_to')::timestamptz)
 ORDER BY o.id
 LIMIT @max_rows::integer;

-- OutboxConsoleRedriveDeadMany redrives dead messages, as OutboxRedriveDead
-- does one: pending, attempts 0, available now; last_error keeps the
-- history. Callers NOTIFY (OutboxNotify) afterwards to wake dispatchers.
-- Lock strategy: one UPDATE by primary key over the id array, guarded by
-- status = 'dead'. Returns the ids it changed; a missing id is not dead
-- (any more) or does not exist, and was left alone.
-- name: OutboxConsoleRedriveDeadMany :many
UPDATE outbox
   SET status       = 'pending',
       attempts     = 0,
       available_at = now(),
       done_at      = NULL
 WHERE id = ANY(@ids::bigint[])
   AND status = 'dead'
RETURNING id;

-- OutboxConsoleSkipDeadMany resolves dead messages without delivering them,
-- as OutboxSkipDead does one: skipped now, last_error prefixed with the
-- operator's reason. Unblocks ordered aggregates whose head it was.
-- Lock strategy: one UPDATE by primary key over the id array, guarded by
-- status = 'dead'. Returns the ids it changed; a missing id is not dead
-- (any more) or does not exist, and was left alone.
-- name: OutboxConsoleSkipDeadMany :many
WITH handoff_locks AS (
    -- The head hand-off (migration 00005) locks each ordered row's
    -- aggregate; taken here first, all at once and in key order through
    -- outbox_lock_aggregates (migration 00008, as producers' COMMITs take
    -- them), so a batch can never deadlock with a producer that writes two
    -- of its aggregates, or with another batch.
    SELECT outbox_lock_aggregates(ARRAY(
            SELECT l.aggregate_id
              FROM outbox AS l
             WHERE l.id = ANY (@ids::bigint[])
               AND l.ordered)) AS n
)
UPDATE outbox
   SET status     = 'skipped',
       done_at    = now(),
       last_error = left('skipped: ' || @reason::text || ' | ' || coalesce(last_error, ''), 500)
 WHERE id = ANY(@ids::bigint[])
   AND status = 'dead'
   AND (SELECT n FROM handoff_locks) >= 0
RETURNING id;

-- OutboxConsoleRetryPendingNow makes a pending message in backoff available
-- now (the "retry" of a stalled head that is not dead).
-- Lock strategy: one UPDATE by primary key, guarded by status = 'pending'
-- and available_at in the future. Returns the id it changed; no row: the
-- message is not pending in backoff (claimed, delivered, or already
-- available), and nothing changed.
-- name: OutboxConsoleRetryPendingNow :many
UPDATE outbox
   SET available_at = now()
 WHERE id = @id::bigint
   AND status = 'pending'
   AND available_at > now()
RETURNING id;

-- OutboxConsoleBlocked: ordered aggregates whose head is dead, or whose
-- head is pending or processing and was created before @stalled_after ago
-- (database clock), oldest head first, at most @max_rows. Starts from the
-- heads (column head, migration 00005: the first undelivered row of each
-- aggregate in seq order): the dead ones from outbox_ordered_dead_head
-- (00007) in created_at order, at most @max_rows entries; the stalled live
-- ones from outbox_ordered_txid (pending heads) and outbox_leased
-- (processing rows), one table row each, so bounded by the aggregates with
-- undelivered messages, never by their backlogs. The age test is on the
-- head's created_at: OutboxBlockedAggregates' "oldest undelivered message"
-- is the head but for a row of a producer transaction that started earlier
-- and committed later (seq is commit order, created_at the transaction
-- start), so an aggregate can appear here up to that transaction's length
-- late. For each aggregate shown, its backlog and oldest undelivered
-- message come from outbox_ordered_head alone (INCLUDE columns, 00006), and
-- the head's event type, attempts and error from the primary key.
-- Events committed and not decided yet (the dispatcher decides them before
-- each ordered claim: they wait in outbox_sequenced) are not listed.
-- Index: outbox_ordered_dead_head, outbox_ordered_txid, outbox_leased, then
-- outbox_ordered_head and the primary key for at most @max_rows aggregates.
-- Lock strategy: none (a read; no row locks).
-- No rows: no aggregate is blocked.
-- name: OutboxConsoleBlocked :many
WITH heads AS (
    SELECT h.id, h.aggregate_id, h.status, h.created_at
      FROM ((SELECT d.id, d.aggregate_id, 'dead'::text AS status, d.created_at
               FROM outbox AS d
              WHERE d.ordered AND d.head AND d.status = 'dead'
              ORDER BY d.created_at, d.id
              LIMIT @max_rows::integer)
            UNION ALL
            SELECT p.id, p.aggregate_id, p.status, p.created_at
              FROM outbox AS p
             WHERE p.ordered AND p.head AND p.status = 'pending'
               AND p.created_at < now() - @stalled_after::interval
            UNION ALL
            SELECT l.id, l.aggregate_id, l.status, l.created_at
              FROM outbox AS l
             WHERE l.status = 'processing' AND l.ordered AND l.head
               AND l.created_at < now() - @stalled_after::interval) AS h
     ORDER BY h.created_at, h.id
     LIMIT @max_rows::integer
)
SELECT h.aggregate_id,
       h.id         AS head_id,
       h.status     AS head_status,
       o.event_type AS head_event_type,
       o.attempts   AS head_attempts,
       o.last_error AS head_last_error,
       a.backlog,
       extract(epoch FROM now() - a.oldest_created_at)::float8 AS oldest_age_seconds
  FROM heads AS h
 CROSS JOIN LATERAL (
        SELECT count(*) AS backlog, min(u.created_at) AS oldest_created_at
          FROM outbox AS u
         WHERE u.aggregate_id = h.aggregate_id
           AND u.ordered AND u.seq IS NOT NULL AND u.status IN ('pending', 'processing', 'dead')) AS a
  JOIN outbox AS o ON o.id = h.id
 ORDER BY a.oldest_created_at, h.id;

-- OutboxConsoleBlockedCount: how many ordered aggregates are blocked (as in
-- OutboxConsoleBlocked: a dead head, or a live head older than
-- @stalled_after), stopping at @cap.
-- Index: outbox_ordered_dead_head alone (00007), outbox_ordered_txid and
-- outbox_leased (one table row per live head): the heads, never the rows
-- queued behind them.
-- Lock strategy: none (a read; no row locks). Always one row (0: none blocked).
-- name: OutboxConsoleBlockedCount :one
SELECT count(*) AS blocked
  FROM ((SELECT 1
           FROM outbox AS d
          WHERE d.ordered AND d.head AND d.status = 'dead'
          LIMIT @cap::integer)
        UNION ALL
        SELECT 1
          FROM outbox AS p
         WHERE p.ordered AND p.head AND p.status = 'pending'
           AND p.created_at < now() - @stalled_after::interval
        UNION ALL
        SELECT 1
          FROM outbox AS l
         WHERE l.status = 'processing' AND l.ordered AND l.head
           AND l.created_at < now() - @stalled_after::interval
        LIMIT @cap::integer) AS b;
