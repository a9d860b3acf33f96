-- Claims from a cursor (migration 00005). OutboxClaim scans outbox_pending
-- from its start, and while any snapshot older than the rows it claimed is
-- open, that start is a run of dead index entries that grows with every row
-- processed: each claim pays for all of them. The claims here begin where
-- the previous claim of the same dispatcher ended, so their cost follows
-- the rows that arrived since, never the age of the oldest snapshot.
--
-- The cursor, kept by the caller between claims (dispatcher/window.go):
-- * @snapshot (a pg_snapshot as text, from OutboxClaimSnapshot): every
--   pending row whose txid is visible in it, and whose available_at is at or
--   before @due_after, has been handed out: claimed by somebody, or found
--   locked by a concurrent claim. A row is new to the cursor when its txid is
--   not visible in @snapshot: its transaction was still open then (the
--   snapshot's xip list) or began later (txid >= xmax).
-- * @after_txid/@after_id: a keyset inside the fresh lane, so a window with
--   more rows than one batch is read forward, page by page.
-- * @due_after: the database time of the snapshot; rows whose available_at
--   is later have come due since (or are not due yet).
-- The caller advances the cursor to a new OutboxClaimSnapshot, taken just
-- before the claim, whenever a claim returns fewer rows than @batch (the
-- window is exhausted); otherwise it moves the keyset to the last fresh row.
-- A snapshot taken before the claim is never newer than the claim's own, so
-- nothing the claim could not see is ever counted as handed out.

-- OutboxClaimSnapshot reads the cursor position for the next
-- OutboxClaimWindow: the current txid snapshot and database time. Call it
-- right before the claim (an earlier snapshot is safe, a later one is not).
-- Lock strategy: none. Always one row.
-- name: OutboxClaimSnapshot :one
SELECT pg_current_snapshot()::text AS snapshot,
       (pg_snapshot_xmax(pg_current_snapshot())::text)::bigint AS xmax,
       now()::timestamptz AS at;

-- OutboxClaimWindow claims up to @batch unordered pending messages that are
-- new to the cursor, in three lanes. Each lane reads at most @batch rows and
-- is not read at all once the lanes before it filled the batch; the claim
-- takes the first @batch in lane order:
-- 1. open: rows of transactions that were still open at @snapshot (its xip
--    list): one index probe per listed transaction (a lateral join, so that
--    no plan can read the whole pending index instead). A long-open writer
--    stays on the list and costs one probe that finds nothing; its own rows
--    are claimed when it commits.
-- 2. fresh: rows past the keyset (@after_txid, @after_id) and at or past the
--    snapshot's xmax, in (txid, id) order: transactions that began after the
--    cursor, oldest first. Within one transaction, id order.
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
-- Lock strategy: FOR UPDATE SKIP LOCKED in each lane, then one UPDATE by
-- primary key through id = ANY(ARRAY(...)), as in OutboxClaim. A row found
-- locked by a concurrent claim is passed: that claim takes it. (Should that
-- claim roll back, the row is pending again behind the cursor; the caller's
-- periodic OutboxRequeuePassed returns it to the fresh lane.)
-- Indexes: outbox_pending_txid (open, fresh), outbox_pending_due (due).
-- 0 rows: nothing new is claimable since the cursor; with fewer rows than
-- @batch the window is exhausted and the caller advances the cursor.
-- name: OutboxClaimWindow :many
WITH win AS (
    SELECT (@snapshot::text)::pg_snapshot AS snap
),
open_tx AS (
    SELECT o.id
      FROM outbox AS o
     WHERE o.id = ANY (ARRAY(
            SELECT p.id
              FROM (SELECT pg_snapshot_xip(win.snap) AS xid FROM win) AS x
             CROSS JOIN LATERAL (
                    SELECT p.id
                      FROM outbox AS p
                     WHERE p.txid = x.xid
                       AND p.status = 'pending'
                       AND NOT p.ordered
                     ORDER BY p.txid, p.id
                     LIMIT @batch::integer) AS p))
       AND o.status = 'pending'
       AND NOT o.ordered
       AND o.available_at <= now()
     ORDER BY o.txid, o.id
     LIMIT @batch::integer
       FOR UPDATE SKIP LOCKED
),
fresh AS (
    SELECT o.id
      FROM outbox AS o
     WHERE (o.txid, o.id) > ((@after_txid::bigint)::text::xid8, @after_id::bigint)
       AND o.txid >= (SELECT pg_snapshot_xmax(win.snap) AS xmax FROM win)
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
              o.event_type, o.payload, o.headers, o.created_at, o.txid
)
SELECT c.id, c.lease_version, c.attempts, c.aggregate_type, c.aggregate_id,
       c.event_type, c.payload, c.headers, c.created_at,
       (c.txid::text)::bigint AS txid,
       (CASE WHEN c.id IN (SELECT id FROM open_tx) THEN 'open'
             WHEN c.id IN (SELECT id FROM fresh) THEN 'fresh'
             ELSE 'due' END)::text AS lane
  FROM claimed AS c
 ORDER BY c.txid, c.id;

-- OutboxRequeuePassed returns to the fresh lane the pending rows that a
-- cursor has passed without handing them out: rows found locked by a
-- concurrent claim that then rolled back (its dispatcher died inside the
-- claim), or rows made claimable in a way the stamp trigger cannot see (a
-- created_at set in the future by hand). It stamps them with the current
-- transaction's id, so every cursor sees them as new. A dispatcher runs it
-- now and then (Config.SweepInterval), with its cursor's @snapshot and
-- @due_after; it normally changes nothing.
-- This is the one query here that reads from the start of the pending rows,
-- so it pays for the dead entries a long snapshot leaves behind; it runs
-- apart from the claims, on the recovery lane, at most once per interval.
-- Lock strategy: FOR UPDATE SKIP LOCKED (a row a claim holds is that
-- claim's), then UPDATE by primary key.
-- Index: outbox_pending_txid (txid visible in @snapshot: below its xmax).
-- Rows affected: rows stamped; 0 is the normal case.
-- name: OutboxRequeuePassed :execrows
UPDATE outbox
   SET txid = pg_current_xact_id()
 WHERE id = ANY (ARRAY(
        SELECT p.id
          FROM outbox AS p
         WHERE p.txid < pg_snapshot_xmax((@snapshot::text)::pg_snapshot)
           AND pg_visible_in_snapshot(p.txid, (@snapshot::text)::pg_snapshot)
           AND p.available_at <= @due_after::timestamptz
           AND p.status = 'pending'
           AND NOT p.ordered
         ORDER BY p.txid, p.id
         LIMIT @max_rows::integer
           FOR UPDATE SKIP LOCKED));
