-- Rows that came from another server (migration 00008): restored with
-- pg_restore, copied by logical replication, or inserted while the table's
-- triggers were off. The relay's recovery lane runs these when it starts and
-- on every pass (they find nothing, cheaply, in the normal case);
-- `pgoutbox repair` runs them on demand, and `pgoutbox stats` reports what
-- they would find (OutboxPortability).

-- OutboxRestampForeign gives up to @max_rows pending unordered rows, and up
-- to @max_rows pending ordered heads, whose txid this server has not
-- assigned (at or beyond the current snapshot's xmax: a visible row never
-- has such a txid unless it came from another server) the current
-- transaction's txid, so every claim cursor sees them as new and claims
-- them. Call it until it returns fewer than @max_rows.
-- Lock strategy: plain UPDATE by primary key of the rows chosen; status is
-- re-checked on the row version updated.
-- Indexes: outbox_pending_txid and outbox_ordered_txid, read from the
-- snapshot's xmax on (one descent each when nothing is found).
-- Rows affected: rows re-stamped; 0 is the normal case.
-- name: OutboxRestampForeign :execrows
WITH cur AS MATERIALIZED (
    SELECT pg_snapshot_xmax(pg_current_snapshot()) AS xmax
)
UPDATE outbox AS o
   SET txid = pg_current_xact_id()
 WHERE o.id = ANY (ARRAY(
        (SELECT p.id
           FROM outbox AS p
          WHERE p.txid >= (SELECT cur.xmax FROM cur)
            AND p.status = 'pending'
            AND NOT p.ordered
          ORDER BY p.txid, p.id
          LIMIT @max_rows::integer)
        UNION ALL
        (SELECT h.id
           FROM outbox AS h
          WHERE h.txid >= (SELECT cur.xmax FROM cur)
            AND h.ordered
            AND h.head
            AND h.status = 'pending'
          ORDER BY h.txid, h.id
          LIMIT @max_rows::integer)))
   AND o.status = 'pending';

-- OutboxRepairUnsequenced sequences up to @max_rows ordered rows that were
-- inserted with the table's triggers off and so never sequenced (function
-- outbox_repair_unsequenced, migration 00008: in id order, under the
-- aggregates' locks, deciding heads as a COMMIT does). Run it read committed
-- (the function refuses otherwise); call it until it returns fewer than
-- @max_rows.
-- Lock strategy: outbox_lock_aggregates, then UPDATE by primary key.
-- Index: outbox_ordered_unresolved, outbox_ordered_seq.
-- Returns the rows sequenced; 0 is the normal case.
-- name: OutboxRepairUnsequenced :one
SELECT outbox_repair_unsequenced(@max_rows::integer)::integer AS sequenced;

-- OutboxRepairSequences moves the id identity sequence and outbox_seq past
-- the highest id and seq in the table where they are behind (a logical
-- replication copy does not carry sequences), or with @check_only only
-- counts them. @scan_all reads the highest seq of all ordered rows (a scan of
-- the table) instead of trusting the last 1,000 ids to hold it.
-- Lock strategy: none (setval is not transactional; it only moves forward).
-- Index: the primary key (one descent, and the last 1,000 entries).
-- Returns how many of the two sequences are (or were) behind; 0 is normal.
-- name: OutboxRepairSequences :one
SELECT outbox_repair_sequences(@check_only::boolean, @scan_all::boolean)::integer AS behind;

-- OutboxPortability counts, up to @cap each, what the queries above would
-- repair: ordered rows never sequenced (no seq, and none waiting in
-- outbox_sequenced for the relay to decide), pending rows and heads with a txid
-- this server has not assigned, and sequences behind the rows.
-- Lock strategy: none.
-- Indexes: outbox_ordered_unresolved (and outbox_sequenced, a few rows,
-- read whole), outbox_pending_txid, outbox_ordered_txid, the primary key.
-- Always one row (all 0: nothing to repair).
-- name: OutboxPortability :one
SELECT (SELECT count(*)
          FROM (SELECT 1 FROM outbox AS u
                 WHERE u.ordered AND u.seq IS NULL
                   AND NOT EXISTS (SELECT FROM outbox_sequenced AS s WHERE s.message_id = u.id)
                 LIMIT @cap::integer) AS u) AS unsequenced,
       (SELECT count(*)
          FROM ((SELECT 1
                   FROM outbox AS p
                  WHERE p.txid >= pg_snapshot_xmax(pg_current_snapshot()) AND p.status = 'pending' AND NOT p.ordered
                  LIMIT @cap::integer)
                UNION ALL
                (SELECT 1
                   FROM outbox AS h
                  WHERE h.txid >= pg_snapshot_xmax(pg_current_snapshot()) AND h.ordered AND h.head AND h.status = 'pending'
                  LIMIT @cap::integer)) AS f) AS foreign_txids,
       outbox_repair_sequences(true, false)::integer AS sequences_behind;
