-- The relay's claims of pending rows. Each is one autocommit statement
-- (a short transaction): pick rows FOR UPDATE SKIP LOCKED, then set status
-- 'processing', lease_owner, lease_until = now() + @lease, lease_version + 1
-- (the fencing token every later write is fenced by) and attempts + 1
-- (attempts count at claim time), and COMMIT before anything is published.
-- SKIP LOCKED only keeps two claims from taking a row at the same moment;
-- after COMMIT the columns carry the ownership. Expired leases are not
-- claimed here: OutboxClaimExpired (isolate.sql) claims each alone.
--
-- They claim from a cursor. A claim that scans outbox_pending_txid from its
-- start pays, while any snapshot older than the rows it claimed is open, for
-- a run of dead index entries that grows with every row processed. The
-- claims here begin where the previous claim of the same dispatcher ended,
-- so their cost follows the rows that arrived since, never the age of the
-- oldest snapshot.
--
-- The cursor, kept by the caller between claims (dispatcher/window.go),
-- works in windows, as PgQ's batches do: a window is the rows whose txid is
-- visible in its upper snapshot and not in its lower one.
-- * @snapshot (the lower snapshot, a pg_snapshot as text): every pending row
--   whose txid is visible in it, and whose available_at is at or before
--   @due_after, has been handed out (claimed by somebody, or found locked by
--   a concurrent claim). A row is new when its txid is not visible in it:
--   its transaction was still open then (the xip list) or began later
--   (txid >= xmax).
-- * @upper (the upper snapshot, from OutboxClaimSnapshot when the window
--   began): the window holds only transactions committed by then. Those
--   still open at @upper belong to the next window, so the window cannot
--   grow behind its keyset: a transaction that began after @snapshot but
--   commits late is never passed by the keyset of a window it is not in.
-- * @after_txid/@after_id: the keyset inside the window's fresh lane, so a
--   window with more rows than one batch is read forward, page by page.
-- * @due_after: the database time up to which due rows were handed out.
-- The caller starts a window with @upper = a new OutboxClaimSnapshot (taken
-- just before the claim) and the keyset at @snapshot's xmax; it moves the
-- keyset to the last fresh row after a full claim; after a claim that came
-- back short (the window is exhausted) the upper snapshot becomes the lower
-- one and @due_after that claim's OutboxClaimSnapshot time. A snapshot taken
-- before the claim is never newer than the claim's own, so nothing the
-- claim could not see is ever counted as handed out.

-- OutboxClaimSnapshot reads the cursor position for the next
-- OutboxClaimWindow: the current txid snapshot and database time. Call it
-- right before the claim (an earlier snapshot is safe, a later one is not).
-- server identifies the server the snapshot belongs to: a txid snapshot
-- means nothing on another server, and a server that crashed and
-- restarted, or a standby promoted after a failover, can hand out again the
-- txids of transactions whose WAL it never got (the old primary's last
-- transactions, rolled back or lost with it): rows of its new transactions
-- would look visible in a snapshot taken before, so already handed out. It
-- is the system identifier (another cluster: a restored copy, a logical
-- replica), the timeline the server writes WAL on (a promoted standby, a
-- point-in-time recovery), the postmaster's start time (a restart) and the
-- time its shared statistics were last reset: PostgreSQL discards them when
-- it recovers from a crash without restarting the postmaster (a backend
-- killed by the kernel), which none of the others shows; a DBA's
-- pg_stat_reset_shared('bgwriter') changes it too, which only starts the
-- cursor over once. When server changes, or xmax goes back, the caller
-- starts its cursor over.
-- Lock strategy: none. Always one row.
-- Index: none (no table read).
-- name: OutboxClaimSnapshot :one
SELECT pg_current_snapshot()::text AS snapshot,
       (pg_snapshot_xmax(pg_current_snapshot())::text)::bigint AS xmax,
       now()::timestamptz AS at,
       concat_ws('/', (pg_control_system()).system_identifier,
                 CASE WHEN pg_is_in_recovery() THEN 'recovery' ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END,
                 extract(epoch FROM pg_postmaster_start_time()),
                 extract(epoch FROM pg_stat_get_bgwriter_stat_reset_time()))::text AS server;

-- OutboxClaimWindow claims up to @batch unordered pending messages that are
-- new to the cursor, in three lanes. Each lane reads at most @batch rows and
-- is not read at all once the lanes before it filled the batch; the claim
-- takes the first @batch in lane order:
-- 1. open: rows of transactions that were still open at @snapshot (its xip
--    list) and committed by @upper: one index probe per listed transaction,
--    which locks what it finds (a lateral join with its own FOR UPDATE, so
--    that no plan can read the whole pending index instead: an outer
--    id = ANY(...) lookup sorted by (txid, id) let the planner read
--    outbox_pending_txid from its start, every entry dead under a held
--    snapshot, 17,000 buffers a claim five minutes into a hold). A long-open writer
--    stays on the list and costs one probe that finds nothing; its own rows
--    are claimed when it commits.
-- 2. fresh: rows of transactions that began after @snapshot and committed by
--    @upper, past the keyset (@after_txid, @after_id), in (txid, id) order:
--    oldest transaction first, id order within one.
-- 3. due: rows whose available_at lies after created_at and after
--    @due_after, and has come: retries, defers, hand-backs, redrives and
--    scheduled events that came due since the cursor, by available_at.
-- A row counted by an earlier lane is not counted again.
-- First-come: among rows that became claimable in the same window, older
-- transactions first, then insertion order; a row that comes due later is
-- claimed after the window it comes due in. No starvation: every lane reads
-- forward, and the cursor passes a row only once it was handed out.
-- lane says which lane found the row ('open', 'fresh', 'due'); txid is the
-- row's txid (for the keyset of the fresh lane).
-- Lock strategy: FOR UPDATE SKIP LOCKED in each lane (in the open lane,
-- inside each transaction's probe: rows a probe locked past the lane's
-- @batch stay locked only until this statement commits, and the next claim
-- finds them, since a full claim does not close the window), then one
-- UPDATE by primary key through id = ANY(ARRAY(...)) (one index scan over
-- the chosen ids; a join to the CTE let the planner pick a hash join over
-- the whole table at large batches). A row found
-- locked by a concurrent claim is passed: that claim takes it. (Should that
-- claim roll back, the row is pending again behind the cursor; the caller's
-- periodic OutboxClaimPassed recovers it.)
-- Indexes: outbox_pending_txid (open, fresh), outbox_due (due; it holds
-- ordered heads' entries too, skipped on their table rows).
-- 0 rows: nothing new is claimable since the cursor; with fewer rows than
-- @batch the window is exhausted and the caller advances the cursor.
-- name: OutboxClaimWindow :many
WITH win AS (
    SELECT (@snapshot::text)::pg_snapshot AS snap, (@upper::text)::pg_snapshot AS upper
),
open_tx AS (
    SELECT p.id
      FROM (SELECT pg_snapshot_xip(win.snap) AS xid, win.upper FROM win) AS x
     CROSS JOIN LATERAL (
            SELECT p.txid, p.id
              FROM outbox AS p
             WHERE p.txid = x.xid
               AND p.status = 'pending'
               AND NOT p.ordered
               AND p.available_at <= now()
               AND pg_visible_in_snapshot(x.xid, x.upper)
             ORDER BY p.txid, p.id
             LIMIT @batch::integer
               FOR UPDATE SKIP LOCKED) AS p
     ORDER BY p.txid, p.id
     LIMIT @batch::integer
),
fresh AS (
    SELECT o.id
      FROM outbox AS o
     WHERE (o.txid, o.id) > ((@after_txid::bigint)::text::xid8, @after_id::bigint)
       AND o.txid >= (SELECT pg_snapshot_xmax(win.snap) AS xmax FROM win)
       AND o.txid < (SELECT pg_snapshot_xmax(win.upper) AS xmax FROM win)
       AND pg_visible_in_snapshot(o.txid, (SELECT win.upper FROM win))
       AND o.status = 'pending'
       AND NOT o.ordered
       AND o.available_at <= now()
       AND (SELECT count(*) FROM open_tx) < @batch::integer
     ORDER BY o.txid, o.id
     LIMIT @batch::integer
       FOR UPDATE SKIP LOCKED
),
due AS (
    SELECT o.id
      FROM outbox AS o
     WHERE o.available_at > @due_after::timestamptz
       AND o.available_at <= now()
       AND o.available_at > o.created_at
       AND o.status = 'pending'
       AND NOT o.ordered
       AND o.id <> ALL (ARRAY(SELECT id FROM open_tx UNION ALL SELECT id FROM fresh))
       AND (SELECT count(*) FROM open_tx) + (SELECT count(*) FROM fresh) < @batch::integer
     ORDER BY o.available_at, o.id
     LIMIT @batch::integer
       FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE outbox AS o
       SET status        = 'processing',
           lease_owner   = @owner::text,
           lease_until   = now() + @lease::interval,
           lease_version = o.lease_version + 1,
           attempts      = o.attempts + 1
     WHERE o.id = ANY ((ARRAY(SELECT id FROM open_tx UNION ALL SELECT id FROM fresh UNION ALL SELECT id FROM due))[1:@batch::integer])
    RETURNING o.id, o.lease_version, o.attempts, o.aggregate_type, o.aggregate_id,
              o.event_type, o.payload, o.headers, o.created_at, o.txid, o.seq, o.prev_seq, o.sent_seq
)
SELECT c.id, c.lease_version, c.attempts, c.aggregate_type, c.aggregate_id,
       c.event_type, c.payload, c.headers, c.created_at,
       (c.txid::text)::bigint AS txid,
       coalesce(c.seq, 0)::bigint AS seq, coalesce(c.prev_seq, 0)::bigint AS prev_seq,
       coalesce(c.sent_seq, 0)::bigint AS sent_seq,
       (CASE WHEN c.id IN (SELECT id FROM open_tx) THEN 'open'
             WHEN c.id IN (SELECT id FROM fresh) THEN 'fresh'
             ELSE 'due' END)::text AS lane
  FROM claimed AS c
 ORDER BY c.txid, c.id;

-- OutboxClaimPassed claims, without their payloads, the pending unordered
-- rows that a cursor has passed without handing them out: rows found locked
-- by a concurrent claim that then rolled back — its process died inside the
-- claim, or the claim failed or timed out on one of its rows (a payload that
-- cannot be returned) and its statement still held the rows while the
-- cursors moved on — and rows made claimable in a way the stamp trigger
-- cannot see (a created_at set in the future by hand). Such rows are
-- suspects, so the dispatcher treats them like recovered leases: its
-- recovery lane reads each one alone (OutboxIsolateRead) and publishes it
-- alone, so the one row that failed a claim fails only itself. A dispatcher
-- runs it now and then (Config.SweepInterval) with its cursor's lower
-- @snapshot and @due_after; it normally claims nothing.
-- @since and @due_since bound the sweep to the rows the cursor passed since
-- an earlier position (an older lower snapshot and its due mark): rows whose
-- txid is visible in @snapshot but not in @since (from @since's xmax, and
-- one probe per transaction on @since's xip list), and rows that came due
-- after @due_since. The dispatcher passes the position of two sweeps before,
-- so a row passed just before the previous sweep, held by a claim that
-- rolled back after it, is still covered. Under a long-held snapshot a sweep
-- from the start steps over the dead entries of every row processed since
-- the snapshot began; the bounded sweep reads those of two intervals only.
-- An empty @since (or the empty snapshot '1:1:') with the zero @due_since
-- sweeps from the start: the dispatcher does that once in ten sweeps, for
-- anything else.
-- Lock strategy: FOR UPDATE SKIP LOCKED (a row a claim holds is that
-- claim's; a row still held by a failed claim's statement is taken at a
-- later sweep), then UPDATE by primary key, writing the lease as every claim
-- does (lease_version + 1, attempts + 1).
-- Indexes: outbox_pending_txid (txid from @since's xmax, and per @since's
-- xip entry), outbox_due (available_at after @due_since).
-- 0 rows: nothing was passed (the normal case).
-- name: OutboxClaimPassed :many
WITH win AS (
    SELECT (@snapshot::text)::pg_snapshot AS snap, coalesce(nullif(@since::text, ''), '1:1:')::pg_snapshot AS since
),
cand AS (
    (SELECT p.id
       FROM outbox AS p
      WHERE p.txid >= (SELECT pg_snapshot_xmax(win.since) FROM win)
        AND p.txid < (SELECT pg_snapshot_xmax(win.snap) FROM win)
        AND pg_visible_in_snapshot(p.txid, (SELECT win.snap FROM win))
        AND p.available_at <= @due_after::timestamptz
        AND p.status = 'pending'
        AND NOT p.ordered
      ORDER BY p.txid, p.id
      LIMIT @max_rows::integer)
    UNION ALL
    (SELECT q.id
       FROM (SELECT pg_snapshot_xip(win.since) AS xid, win.snap FROM win) AS x
      CROSS JOIN LATERAL (
            SELECT p.id
              FROM outbox AS p
             WHERE p.txid = x.xid
               AND pg_visible_in_snapshot(x.xid, x.snap)
               AND p.available_at <= @due_after::timestamptz
               AND p.status = 'pending'
               AND NOT p.ordered
             ORDER BY p.txid, p.id
             LIMIT @max_rows::integer) AS q)
    UNION ALL
    (SELECT p.id
       FROM outbox AS p
      WHERE p.available_at > @due_since::timestamptz
        AND p.available_at <= @due_after::timestamptz
        AND p.available_at > p.created_at
        AND p.txid < (SELECT pg_snapshot_xmax(win.snap) FROM win)
        AND pg_visible_in_snapshot(p.txid, (SELECT win.snap FROM win))
        AND p.status = 'pending'
        AND NOT p.ordered
      ORDER BY p.available_at, p.id
      LIMIT @max_rows::integer)
)
UPDATE outbox AS o
   SET status        = 'processing',
       lease_owner   = @owner::text,
       lease_until   = now() + @lease::interval,
       lease_version = o.lease_version + 1,
       attempts      = o.attempts + 1
 WHERE o.id = ANY (ARRAY(
        SELECT l.id
          FROM outbox AS l
         WHERE l.id = ANY (ARRAY(SELECT cand.id FROM cand))
           AND l.status = 'pending'
           AND NOT l.ordered
         ORDER BY l.txid, l.id
         LIMIT @max_rows::integer
           FOR UPDATE SKIP LOCKED))
RETURNING o.id, o.lease_version, o.attempts, o.ordered;

-- OutboxClaimOrderedWindow claims up to @batch ordered heads that are new to
-- the cursor: the same cursor, lanes and order as OutboxClaimWindow, over
-- rows flagged head (migration 00005). A row is flagged head when it becomes
-- the first undelivered row of its aggregate in commit (seq) order: at its
-- COMMIT when the aggregate had nothing undelivered, or when the head before
-- it became done (the hand-off stamps its txid, so it is new to every
-- cursor). So at most one row per aggregate is claimable, in commit order,
-- without reading any aggregate's delivered rows: the claim's cost does not
-- grow while a long snapshot is held. A dead head keeps its flag and blocks
-- its aggregate until redriven (pending again: stamped, due lane) or
-- skipped (done: hand-off).
-- Why seq is commit order: seq is assigned at COMMIT by the deferred trigger
-- outbox_commit_order (migration 00004), under a transaction-level advisory
-- lock on the aggregate that PostgreSQL releases only after the commit is
-- visible. The next transaction of the aggregate draws its seq only after
-- that, so per aggregate seq follows the commit order of the producing
-- transactions (and insertion order within one), and a row with a lower seq
-- is visible to every snapshot that sees a row with a higher one. Ordering
-- by id or xid would not do: both are assigned before COMMIT and become
-- visible in another order. An open transaction that wrote ordered events
-- holds no position until it commits, so it delays no head.
-- Round-robin: heads are claimed in the order they became heads, oldest
-- first, so no aggregate waits behind another's backlog.
-- Lock strategy: as OutboxClaimWindow; the head flag and status are
-- re-checked on the locked row version.
-- Indexes: outbox_ordered_txid (open, fresh), outbox_due (due; it holds
-- unordered entries too, skipped on their table rows).
-- Each row comes with its position (migration 00010): seq, prev_seq (the
-- aggregate's previous event) and sent_seq (the latest earlier event that
-- was delivered), 0 for none; prev_seq <> sent_seq means the previous
-- event was skipped. OutboxClaimWindow returns the same columns (0 for
-- unordered rows), so that both share one row type.
-- 0 rows: no new head is claimable since the cursor.
-- name: OutboxClaimOrderedWindow :many
WITH win AS (
    SELECT (@snapshot::text)::pg_snapshot AS snap, (@upper::text)::pg_snapshot AS upper
),
open_tx AS (
    SELECT p.id
      FROM (SELECT pg_snapshot_xip(win.snap) AS xid, win.upper FROM win) AS x
     CROSS JOIN LATERAL (
            SELECT p.txid, p.id
              FROM outbox AS p
             WHERE p.txid = x.xid
               AND p.ordered
               AND p.head
               AND p.status = 'pending'
               AND p.available_at <= now()
               AND pg_visible_in_snapshot(x.xid, x.upper)
             ORDER BY p.txid, p.id
             LIMIT @batch::integer
               FOR UPDATE SKIP LOCKED) AS p
     ORDER BY p.txid, p.id
     LIMIT @batch::integer
),
fresh AS (
    SELECT o.id
      FROM outbox AS o
     WHERE (o.txid, o.id) > ((@after_txid::bigint)::text::xid8, @after_id::bigint)
       AND o.txid >= (SELECT pg_snapshot_xmax(win.snap) AS xmax FROM win)
       AND o.txid < (SELECT pg_snapshot_xmax(win.upper) AS xmax FROM win)
       AND pg_visible_in_snapshot(o.txid, (SELECT win.upper FROM win))
       AND o.ordered
       AND o.head
       AND o.status = 'pending'
       AND o.available_at <= now()
       AND (SELECT count(*) FROM open_tx) < @batch::integer
     ORDER BY o.txid, o.id
     LIMIT @batch::integer
       FOR UPDATE SKIP LOCKED
),
due AS (
    SELECT o.id
      FROM outbox AS o
     WHERE o.available_at > @due_after::timestamptz
       AND o.available_at <= now()
       AND o.available_at > o.created_at
       AND o.ordered
       AND o.head
       AND o.status = 'pending'
       AND o.id <> ALL (ARRAY(SELECT id FROM open_tx UNION ALL SELECT id FROM fresh))
       AND (SELECT count(*) FROM open_tx) + (SELECT count(*) FROM fresh) < @batch::integer
     ORDER BY o.available_at, o.id
     LIMIT @batch::integer
       FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE outbox AS o
       SET status        = 'processing',
           lease_owner   = @owner::text,
           lease_until   = now() + @lease::interval,
           lease_version = o.lease_version + 1,
           attempts      = o.attempts + 1
     WHERE o.id = ANY ((ARRAY(SELECT id FROM open_tx UNION ALL SELECT id FROM fresh UNION ALL SELECT id FROM due))[1:@batch::integer])
    RETURNING o.id, o.lease_version, o.attempts, o.aggregate_type, o.aggregate_id,
              o.event_type, o.payload, o.headers, o.created_at, o.txid, o.seq, o.prev_seq, o.sent_seq
)
SELECT c.id, c.lease_version, c.attempts, c.aggregate_type, c.aggregate_id,
       c.event_type, c.payload, c.headers, c.created_at,
       (c.txid::text)::bigint AS txid,
       coalesce(c.seq, 0)::bigint AS seq, coalesce(c.prev_seq, 0)::bigint AS prev_seq,
       coalesce(c.sent_seq, 0)::bigint AS sent_seq,
       (CASE WHEN c.id IN (SELECT id FROM open_tx) THEN 'open'
             WHEN c.id IN (SELECT id FROM fresh) THEN 'fresh'
             ELSE 'due' END)::text AS lane
  FROM claimed AS c
 ORDER BY c.txid, c.id;

-- OutboxClaimPassedOrdered is OutboxClaimPassed for ordered heads (each is
-- the only claimable row of its aggregate, so recovering it keeps the order),
-- bounded the same way by @since and @due_since.
-- Lock strategy: as OutboxClaimPassed. Indexes: outbox_ordered_txid,
-- outbox_due.
-- 0 rows: nothing was passed (the normal case).
-- name: OutboxClaimPassedOrdered :many
WITH win AS (
    SELECT (@snapshot::text)::pg_snapshot AS snap, coalesce(nullif(@since::text, ''), '1:1:')::pg_snapshot AS since
),
cand AS (
    (SELECT p.id
       FROM outbox AS p
      WHERE p.txid >= (SELECT pg_snapshot_xmax(win.since) FROM win)
        AND p.txid < (SELECT pg_snapshot_xmax(win.snap) FROM win)
        AND pg_visible_in_snapshot(p.txid, (SELECT win.snap FROM win))
        AND p.available_at <= @due_after::timestamptz
        AND p.ordered
        AND p.head
        AND p.status = 'pending'
      ORDER BY p.txid, p.id
      LIMIT @max_rows::integer)
    UNION ALL
    (SELECT q.id
       FROM (SELECT pg_snapshot_xip(win.since) AS xid, win.snap FROM win) AS x
      CROSS JOIN LATERAL (
            SELECT p.id
              FROM outbox AS p
             WHERE p.txid = x.xid
               AND pg_visible_in_snapshot(x.xid, x.snap)
               AND p.available_at <= @due_after::timestamptz
               AND p.ordered
               AND p.head
               AND p.status = 'pending'
             ORDER BY p.txid, p.id
             LIMIT @max_rows::integer) AS q)
    UNION ALL
    (SELECT p.id
       FROM outbox AS p
      WHERE p.available_at > @due_since::timestamptz
        AND p.available_at <= @due_after::timestamptz
        AND p.available_at > p.created_at
        AND p.txid < (SELECT pg_snapshot_xmax(win.snap) FROM win)
        AND pg_visible_in_snapshot(p.txid, (SELECT win.snap FROM win))
        AND p.ordered
        AND p.head
        AND p.status = 'pending'
      ORDER BY p.available_at, p.id
      LIMIT @max_rows::integer)
)
UPDATE outbox AS o
   SET status        = 'processing',
       lease_owner   = @owner::text,
       lease_until   = now() + @lease::interval,
       lease_version = o.lease_version + 1,
       attempts      = o.attempts + 1
 WHERE o.id = ANY (ARRAY(
        SELECT l.id
          FROM outbox AS l
         WHERE l.id = ANY (ARRAY(SELECT cand.id FROM cand))
           AND l.ordered
           AND l.head
           AND l.status = 'pending'
         ORDER BY l.txid, l.id
         LIMIT @max_rows::integer
           FOR UPDATE SKIP LOCKED))
RETURNING o.id, o.lease_version, o.attempts, o.ordered;

-- OutboxDecideCommitted moves the seq each ordered event drew at its
-- producer's COMMIT (its row in outbox_sequenced) into the event and
-- decides the event's head, prev_seq and sent_seq: a row is its aggregate's
-- head when its previous row (the highest seq below its own) is done or
-- skipped, or there is none. Up to @max_rows rows, lowest seq first, under
-- the aggregates' advisory locks, read after taking them (in the function
-- outbox_decide_committed, since one statement cannot read after its own
-- locks). Decided rows are stamped with this transaction's txid, so the
-- ordered cursor sees a new head as new. The dispatcher runs it right
-- before each ordered claim and on every recovery pass, read committed.
-- @after_seq, @seen_seq, @seen_holders and @server are what the previous
-- call returned (0, 0, {} and '' the first time): the read starts above the
-- floor @after_seq, so under a long-held snapshot it does not step over the
-- dead entries of every row decided since. On another server than
-- @server's (as OutboxClaimSnapshot tells them: a restart, a failover, a
-- restored copy) or once outbox_seq went back, the floor starts over: seqs
-- below it may be handed out again.
-- Lock strategy: pg_advisory_xact_lock per aggregate, in key order; the
-- rows of outbox_sequenced are taken by DELETE (one another relay took
-- first is passed).
-- Indexes: outbox_sequenced_pkey (from the floor), outbox_ordered_seq (one
-- backward step per row).
-- Always one row; decided is 0 when nothing was committed since.
-- name: OutboxDecideCommitted :one
WITH here AS (
    SELECT concat_ws('/', (pg_control_system()).system_identifier,
                     CASE WHEN pg_is_in_recovery() THEN 'recovery' ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END,
                     extract(epoch FROM pg_postmaster_start_time()),
                     extract(epoch FROM pg_stat_get_bgwriter_stat_reset_time()))::text AS server
)
SELECT d.decided::integer AS decided, d.after_seq::bigint AS after_seq, d.seen_seq::bigint AS seen_seq,
       d.seen_holders::text[] AS seen_holders, here.server::text AS server
  FROM here
 CROSS JOIN LATERAL outbox_decide_committed(@max_rows::integer,
        CASE WHEN here.server = @server::text THEN @after_seq::bigint ELSE 0 END,
        CASE WHEN here.server = @server::text THEN @seen_seq::bigint ELSE 0 END,
        @seen_holders::text[]) AS d;

-- OutboxRepairHeads flags the head of every aggregate whose first
-- undelivered row (seq order) is not flagged: a safety net for heads lost
-- outside the triggers' view (an undelivered row deleted by hand, a head made
-- done while triggers were disabled, rows claimed by another tool that does
-- not respect the flag). Flagged rows are stamped, so cursors
-- see them as new. It runs now and then (Config.SweepInterval) on the
-- recovery lane and normally changes nothing.
-- This reads each aggregate's first index entries (a loose index scan):
-- under a long-held snapshot it pays for the delivered rows kept, once per
-- interval, off the claim path.
-- A head flagged here gets its sent_seq (migration 00010) from the rows
-- still in the table: the latest earlier one that is done.
-- Lock strategy: plain UPDATE by primary key of the rows chosen.
-- Index: outbox_ordered_head (loose index scan), outbox_ordered_seq (one
-- backward step per head flagged).
-- Rows affected: heads flagged; 0 is the normal case.
-- name: OutboxRepairHeads :execrows
WITH RECURSIVE heads AS (
    (SELECT h.aggregate_id, h.id, h.head
       FROM outbox AS h
      WHERE h.ordered
        AND h.seq IS NOT NULL
        AND h.status IN ('pending', 'processing', 'dead')
      ORDER BY h.aggregate_id, h.seq
      LIMIT 1)
    UNION ALL
    SELECT nxt.aggregate_id, nxt.id, nxt.head
      FROM heads AS prev
     CROSS JOIN LATERAL (
        SELECT h.aggregate_id, h.id, h.head
          FROM outbox AS h
         WHERE h.ordered
           AND h.seq IS NOT NULL
           AND h.status IN ('pending', 'processing', 'dead')
           AND h.aggregate_id > prev.aggregate_id
         ORDER BY h.aggregate_id, h.seq
         LIMIT 1
     ) AS nxt
)
UPDATE outbox AS r
   SET head = true,
       sent_seq = (SELECT p.seq
                     FROM outbox AS p
                    WHERE p.ordered
                      AND p.seq IS NOT NULL
                      AND p.aggregate_id = r.aggregate_id
                      AND p.seq < r.seq
                      AND p.status = 'done'
                    ORDER BY p.aggregate_id, p.seq DESC
                    LIMIT 1),
       txid = pg_current_xact_id()
 WHERE r.id IN (SELECT heads.id FROM heads WHERE heads.head IS NOT TRUE)
   AND r.head IS NOT TRUE;

-- OutboxTableLocked reports whether another session holds, or waits for, a
-- lock on the outbox table that conflicts with the ROW EXCLUSIVE lock every
-- claim takes (SHARE and stronger: CREATE INDEX, most ALTER TABLE, LOCK
-- TABLE, VACUUM FULL). The dispatcher asks after a claim ran out of
-- ClaimTimeout: a claim that waited for such a lock goes on from where it
-- was once the lock is gone; any other timed-out claim is isolated.
-- Lock strategy: none (pg_locks is the lock manager's memory; the regclass
-- cast takes no lock).
-- Always one row.
-- name: OutboxTableLocked :one
SELECT EXISTS (
    SELECT 1
      FROM pg_catalog.pg_locks AS l
     WHERE l.locktype = 'relation'
       AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
       AND l.relation = 'outbox'::regclass
       AND l.pid <> pg_backend_pid()
       AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
) AS locked;
