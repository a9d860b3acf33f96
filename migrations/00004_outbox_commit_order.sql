-- +goose Up
-- Ordered delivery in commit order. Until now an aggregate's events were
-- ordered by (xid, id) and a head was claimable only below the snapshot's
-- xmin horizon. Neither is commit order (a transaction that took its xid
-- earlier can commit later, after a transaction that saw its predecessor's
-- business change), and the horizon is server-wide: one open writing
-- transaction anywhere stalled every ordered aggregate.
--
-- Now every ordered row gets a position, seq, when its transaction COMMITs,
-- under a per-aggregate lock:
-- * outbox_commit_order is a deferred constraint trigger (fires at COMMIT,
--   for ordered rows only). For each row it takes a transaction-level
--   advisory lock for the row's aggregate and sets seq = nextval(outbox_seq)
--   by primary key. Deferred row events fire in insertion order, so within a
--   transaction seq follows insertion order.
-- * PostgreSQL releases a transaction's locks only after its commit is
--   visible. The next transaction of the same aggregate therefore takes the
--   lock (and draws its seq) only after the previous one is visible: per
--   aggregate, seq order is commit order, and a row with a lower seq is
--   visible whenever a row with a higher seq is. That is all the claim needs:
--   the first sequenced undelivered row of an aggregate is its head, with no
--   horizon. An open transaction holds nothing until it commits, so it
--   delays nobody's events (its own rows are unsequenced, hence invisible to
--   the claim until they are sequenced and committed together).
-- * Rows are claimable only once sequenced: seq is NULL until the producing
--   transaction commits (nobody else can see the row before that anyway),
--   and the head index below holds sequenced rows only.
-- * Plain INSERTs from any language and COPY (OutboxEnqueueMany) get it too:
--   the trigger lives in the table.
--
-- Costs (README "Ordering: what is guaranteed"):
-- * Producers of one aggregate serialize their COMMITs (not their whole
--   transactions): the second waits for the first's commit flush.
-- * One extra UPDATE per ordered row at COMMIT.
-- * A transaction writing several aggregates locks them at COMMIT in the
--   order it first wrote them. Two transactions writing the same aggregates
--   in opposite orders can deadlock at COMMIT; PostgreSQL detects it
--   (deadlock_timeout) and aborts one COMMIT with SQLSTATE 40P01, which rolls
--   back that transaction's business change and its events together. Write
--   aggregates in a consistent order (e.g. sorted by aggregate_id) to avoid it.
-- * Lock keys: the single-bigint advisory key space, key = (table oid << 32)
--   | (hashtext(aggregate_id) & 0xffffffff). It cannot collide with the notify
--   gate of 00003, which is in the two-int4 key space (PostgreSQL keeps the
--   two spaces apart). Applications must not take single-bigint advisory
--   locks whose upper 32 bits equal the outbox table's oid. Two aggregates
--   whose hashes collide share a lock: their commits serialize, order stays
--   correct.
-- * Under SET CONSTRAINTS ALL IMMEDIATE (or outbox_commit_order IMMEDIATE)
--   the trigger runs at the end of each inserting statement instead: the
--   aggregate's lock is held from that insert to COMMIT. Still commit order,
--   but producers of the aggregate then wait for each other's whole
--   remaining transaction.
CREATE SEQUENCE outbox_seq AS bigint;

ALTER TABLE outbox ADD COLUMN seq bigint;
ALTER SEQUENCE outbox_seq OWNED BY outbox.seq;

-- Backfill: undelivered ordered rows keep their current relative order
-- ((xid, id), the order 00001-00003 delivered in). The table is locked by the
-- ALTER above for the rest of this migration, so no producer can interleave.
UPDATE outbox AS o
   SET seq = b.seq
  FROM (SELECT id, row_number() OVER (ORDER BY xid, id) AS seq
          FROM outbox
         WHERE ordered AND status IN ('pending', 'processing', 'dead')) AS b
 WHERE o.id = b.id;

SELECT setval('outbox_seq', coalesce((SELECT max(seq) FROM outbox), 0) + 1, false);

-- The function runs as the table owner (SECURITY DEFINER): producers hold
-- INSERT only (docs/roles.sql) and must not be able to change seq themselves.
-- Its search_path is pinned below to the table's schema with pg_temp last,
-- so a session's temporary objects can never stand in for the outbox table
-- or its sequence while it runs with the owner's rights.
-- +goose StatementBegin
CREATE FUNCTION outbox_commit_order() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM pg_advisory_xact_lock((TG_RELID::bigint << 32)
                                  | (hashtext(NEW.aggregate_id)::bigint & 4294967295));
    UPDATE outbox SET seq = nextval('outbox_seq') WHERE id = NEW.id;
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

CREATE CONSTRAINT TRIGGER outbox_commit_order
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.ordered)
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
