-- pgoutbox-migration: 00004_outbox_commit_order.sql
-- +goose Up
-- Ordered delivery in commit order. Until now an aggregate's events were
-- ordered by (xid, id) and a head was claimable only below the snapshot's
-- xmin horizon. Neither is commit order (a transaction that took its xid
-- earlier can commit later, after a transaction that saw its predecessor's
-- business change), and the horizon is server-wide: one open writing
-- transaction anywhere stalled every ordered aggregate.
--
-- Now every ordered row gets a position, seq, when its transaction COMMITs,
-- under per-aggregate locks:
-- * outbox_commit_order is a deferred constraint trigger: it runs at COMMIT,
--   once per transaction that inserted ordered rows. Its WHEN clause queues
--   the event for the first such row only, and records the id span of the
--   transaction's ordered rows in two transaction-local settings
--   (outbox.seq_from: the lowest id, outbox.seq_to: the highest; lowest and
--   highest rather than first and last, so that rows inserted with explicit
--   ids out of order, OVERRIDING SYSTEM VALUE, are all inside the span).
--   It takes a transaction-level advisory lock for every aggregate the
--   transaction wrote ordered rows to, in key order, then sets
--   seq = nextval('outbox_seq') on all of them in one UPDATE, in id order
--   (insertion order within the transaction, COPY included; ids come from
--   the identity column, which hands them out in call order; explicit ids
--   are sequenced in id order).
-- * A row inserted while triggers are disabled (session_replication_role =
--   replica: pg_restore --disable-triggers, a logical replication apply) is
--   never sequenced and so never claimed; insert outbox rows with triggers
--   on.
-- * Which rows: ordered rows with seq IS NULL whose id lies in that span,
--   through the primary key. Every committed ordered row is sequenced (by
--   its own COMMIT) and other open transactions' rows are invisible, so the
--   visible unsequenced rows of the span are exactly this transaction's own.
--   A transaction with one ordered row takes the short path: one lock, one
--   UPDATE by primary key.
-- * PostgreSQL releases a transaction's locks only after its commit is
--   visible. The next transaction of the same aggregate therefore takes the
--   lock (and draws its seq) only after the previous one is visible: per
--   aggregate, seq order is commit order, and a row with a lower seq is
--   visible whenever a row with a higher seq is. That is all the claim needs:
--   the first sequenced undelivered row of an aggregate is its head, with no
--   horizon. An open transaction holds nothing until it commits, so it
--   delays nobody's events.
-- * Plain INSERTs from any language and COPY (OutboxEnqueueMany) get it too:
--   the trigger lives in the table.
--
-- Costs (README "Ordering: what is guaranteed"; BENCHMARKS.md 4b):
-- * Producers of one aggregate serialize their COMMITs (not their whole
--   transactions): the second waits for the first's commit to be flushed.
-- * One function call, one lock per aggregate and one UPDATE statement per
--   transaction at COMMIT (each ordered row is written a second time), and
--   a set_config per ordered row at insert time.
-- * Deadlocks: the locks of one COMMIT are taken in one pass, sorted by key,
--   so two transactions writing the same aggregates in opposite orders do
--   not deadlock. They can under SET CONSTRAINTS ALL IMMEDIATE (below), where
--   each statement locks its own aggregates as it ends: PostgreSQL then
--   detects the cycle (deadlock_timeout) and aborts one transaction with
--   SQLSTATE 40P01, its business change and events together.
-- * Lock keys: the single-bigint advisory key space, key = (table oid << 32)
--   | (hashtext(aggregate_id) & 0xffffffff). It cannot collide with the notify
--   gate of 00003, which is in the two-int4 key space (PostgreSQL keeps the
--   two spaces apart). Applications must not take single-bigint advisory
--   locks whose upper 32 bits equal the outbox table's oid. Two aggregates
--   whose hashes collide share a lock: their commits serialize, order stays
--   correct.
-- * Under SET CONSTRAINTS ALL IMMEDIATE (or outbox_commit_order IMMEDIATE)
--   the trigger runs at the end of each statement that inserted ordered rows
--   instead: their aggregates' locks are held from that statement to COMMIT.
--   Still commit order, but producers of those aggregates then wait for each
--   other's whole remaining transaction (an idle one blocks them).
CREATE SEQUENCE outbox_seq AS bigint;

ALTER TABLE outbox ADD COLUMN seq bigint;
ALTER SEQUENCE outbox_seq OWNED BY outbox.seq;

-- Backfill: every ordered row gets a seq; undelivered ones keep their
-- current relative order ((xid, id), the order 00001-00003 delivered in).
-- The table is locked by the ALTER above for the rest of this migration, so
-- no producer can interleave.
UPDATE outbox AS o
   SET seq = b.seq
  FROM (SELECT id, row_number() OVER (ORDER BY xid, id) AS seq
          FROM outbox
         WHERE ordered) AS b
 WHERE o.id = b.id;

SELECT setval('outbox_seq', coalesce((SELECT max(seq) FROM outbox), 0) + 1, false);

-- Its statements run in the producers' sessions, whose plan caches outlive a
-- purge: with a cached generic plan made while the statistics said the table
-- was empty (a new table, a TRUNCATE or purge followed by ANALYZE), the UPDATE
-- below scanned the whole table at every COMMIT (pgbench, 8 clients, one
-- ordered event per transaction: 5,000 tx/s fell to 1,070 tx/s within 10 s of
-- a TRUNCATE + VACUUM ANALYZE). enable_seqscan = off inside the function
-- keeps every plan it caches on the primary key, whatever the statistics
-- said when the plan was made, without planning each execution anew
-- (plan_cache_mode = force_custom_plan also fixed it, at the cost of a
-- planning pass per COMMIT: producers of ordered events at 0.70x of the
-- unordered rate instead of 0.85x; BENCHMARKS.md 4b).
-- The function runs as the table owner (SECURITY DEFINER): producers hold
-- INSERT only (docs/roles.sql) and must not be able to change seq themselves.
-- Its search_path is pinned below to the table's schema with pg_temp last,
-- so a session's temporary objects can never stand in for the outbox table
-- or its sequence while it runs with the owner's rights.
-- +goose StatementBegin
CREATE FUNCTION outbox_commit_order() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    from_id bigint := nullif(current_setting('outbox.seq_from', true), '')::bigint;
    to_id   bigint := nullif(current_setting('outbox.seq_to', true), '')::bigint;
BEGIN
    -- Later ordered inserts of this transaction (SET CONSTRAINTS ... IMMEDIATE,
    -- or a deferred trigger inserting at COMMIT) queue the next run.
    PERFORM set_config('outbox.seq_from', '', true);
    IF from_id IS NULL OR to_id IS NULL OR to_id = from_id THEN
        -- One ordered row (NEW, the one that queued this run).
        PERFORM pg_advisory_xact_lock((TG_RELID::bigint << 32) | (hashtext(NEW.aggregate_id)::bigint & 4294967295));
        UPDATE outbox SET seq = nextval('outbox_seq') WHERE id = NEW.id AND seq IS NULL;
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock(k.key)
       FROM (SELECT DISTINCT (TG_RELID::bigint << 32) | (hashtext(u.aggregate_id)::bigint & 4294967295) AS key
               FROM outbox AS u
              WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
              ORDER BY 1) AS k;
    -- nextval is evaluated after the ORDER BY of its own subquery level.
    UPDATE outbox AS o
       SET seq = s.seq
      FROM (SELECT m.id, nextval('outbox_seq') AS seq
              FROM (SELECT u.id
                      FROM outbox AS u
                     WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
                     ORDER BY u.id) AS m) AS s
     WHERE o.id = s.id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_commit_order'::regproc,
                   (SELECT n.nspname
                      FROM pg_catalog.pg_class AS c
                      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                     WHERE c.oid = 'outbox'::regclass));
END;
$$;
-- +goose StatementEnd

-- Queued for the first ordered row of a transaction only; every ordered row
-- extends the span to its id. The settings are transaction-local and rolled
-- back with a savepoint, as the deferred event queued inside it is.
CREATE CONSTRAINT TRIGGER outbox_commit_order
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.ordered AND
          CASE WHEN coalesce(current_setting('outbox.seq_from', true), '') = ''
               THEN set_config('outbox.seq_from', NEW.id::text, true) <> ''
                    AND set_config('outbox.seq_to', NEW.id::text, true) <> ''
               ELSE (set_config('outbox.seq_from', least(current_setting('outbox.seq_from')::bigint, NEW.id)::text, true)
                     || set_config('outbox.seq_to', greatest(current_setting('outbox.seq_to')::bigint, NEW.id)::text, true)) = '' END)
    EXECUTE FUNCTION outbox_commit_order();

-- Ordered claim: the first entry per aggregate_id is that aggregate's head in
-- commit order. It holds every sequenced undelivered ordered row, dead
-- included (a dead head blocks its aggregate), and never a done row.
DROP INDEX outbox_ordered_head;
CREATE INDEX outbox_ordered_head ON outbox (aggregate_id, seq)
    WHERE ordered AND seq IS NOT NULL AND status IN ('pending', 'processing', 'dead');

-- Nothing orders by xid any more.
ALTER TABLE outbox DROP COLUMN xid;

-- +goose Down
-- Back to (xid, id) order: every existing row gets this migration's xid, so
-- rows written before the Down are ordered by id among themselves.
ALTER TABLE outbox ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
DROP INDEX outbox_ordered_head;
CREATE INDEX outbox_ordered_head ON outbox (aggregate_id, xid, id)
    WHERE ordered AND status IN ('pending', 'processing', 'dead');
DROP TRIGGER outbox_commit_order ON outbox;
DROP FUNCTION outbox_commit_order();
ALTER TABLE outbox DROP COLUMN seq;
DROP SEQUENCE IF EXISTS outbox_seq;
