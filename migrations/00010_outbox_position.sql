-- pgoutbox-migration: 00010_outbox_position.sql
-- +goose Up
-- Every ordered event carries its position in its aggregate's commit order
-- and what a consumer needs to check it (package inbox): relays send them
-- with the event (dispatcher.Message.Position, the CloudEvents extension
-- attributes pgoutboxseq, pgoutboxprevseq and pgoutboxprevsent).
-- * seq (00004): the event's position, drawn at COMMIT under the
--   aggregate's lock.
-- * prev_seq: the seq of the aggregate's previous ordered event (NULL: the
--   event is the first its aggregate has). Stamped with seq, in the same
--   UPDATE, by whoever sequences the row: the producer's COMMIT
--   (outbox_commit_order), or outbox_repair_unsequenced for rows that
--   arrived with triggers off. A REPEATABLE READ or SERIALIZABLE producer
--   cannot read its aggregate's latest row at COMMIT (00005), so the first
--   row of each aggregate in such a transaction gets its prev_seq with its
--   head decision (outbox_resolve_heads); the rest get it at COMMIT.
-- * sent_seq: the seq of the latest earlier event of the aggregate that
--   was delivered (NULL: none). Known once every earlier event is
--   resolved, i.e. when the row becomes its aggregate's head, and stamped
--   there: at COMMIT when the previous event is already resolved, else by
--   the hand-off (outbox_head_handoff) when it resolves. The resolved head
--   hands on its own seq when it was delivered (status done) and its own
--   sent_seq when it was resolved without delivery (skipped), so a chain of
--   skipped events carries the last delivered position forward.
--   A consumer sees the previous event skipped exactly when
--   sent_seq <> prev_seq (dispatcher.Position.Skipped).
-- Neither column is in an index or an index predicate, so stamping them
-- adds no index entry; unordered rows leave both NULL (no bytes stored).
--
-- Also cheaper COMMITs for producers of ordered events:
-- * outbox_lock_aggregates takes the lock of a single aggregate directly
--   (no sort, no loop).
-- * outbox_commit_order sequences a transaction's ordered rows, stamps
--   their positions and decides their heads in one UPDATE (before: a
--   query per aggregate, then the UPDATE).
-- * The commit-order trigger's WHEN clause calls outbox_commit_span
--   instead of keeping the span inline (below): every INSERT, unordered
--   ones included, paid for compiling that clause.
ALTER TABLE outbox ADD COLUMN prev_seq bigint, ADD COLUMN sent_seq bigint;

-- Backfill the rows still to be delivered (delivered rows are never sent
-- again): prev_seq from the aggregate's rows in seq order, and a head's
-- sent_seq from the latest earlier row that is done (skipped ones, 00009,
-- were not delivered).
UPDATE outbox AS o
   SET prev_seq = b.prev_seq
  FROM (SELECT u.id, u.status, lag(u.seq) OVER (PARTITION BY u.aggregate_id ORDER BY u.seq) AS prev_seq
          FROM outbox AS u
         WHERE u.ordered AND u.seq IS NOT NULL) AS b
 WHERE o.id = b.id
   AND b.status IN ('pending', 'processing', 'dead')
   AND b.prev_seq IS NOT NULL;

UPDATE outbox AS o
   SET sent_seq = (SELECT p.seq
                     FROM outbox AS p
                    WHERE p.ordered
                      AND p.seq IS NOT NULL
                      AND p.aggregate_id = o.aggregate_id
                      AND p.seq < o.seq
                      AND p.status = 'done'
                    ORDER BY p.aggregate_id, p.seq DESC
                    LIMIT 1)
 WHERE o.ordered AND o.head AND o.seq IS NOT NULL AND o.status IN ('pending', 'processing', 'dead');

-- outbox_lock_aggregates as in 00008 (every taker of aggregates' locks, in
-- key order), with a fast path for one aggregate: a producer's COMMIT with
-- one ordered event, the hand-off, a single skip.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_lock_aggregates(aggregate_ids text[]) RETURNS integer
    LANGUAGE plpgsql AS $$
DECLARE
    k bigint;
    n integer := 0;
BEGIN
    IF cardinality(aggregate_ids) = 1 THEN
        IF aggregate_ids[1] IS NULL THEN
            RETURN 0;
        END IF;
        PERFORM pg_advisory_xact_lock(('outbox'::regclass::oid::bigint << 32) | (hashtext(aggregate_ids[1])::bigint & 4294967295));
        RETURN 1;
    END IF;
    FOR k IN SELECT DISTINCT ('outbox'::regclass::oid::bigint << 32) | (hashtext(a)::bigint & 4294967295)
               FROM unnest(aggregate_ids) AS a
              WHERE a IS NOT NULL
              ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(k);
        n := n + 1;
    END LOOP;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- outbox_commit_order as in 00008 (span settings keyed by the table's oid,
-- locks through outbox_lock_aggregates), now one UPDATE after the locks: it
-- draws each row's seq in id order, stamps prev_seq (the row before it in
-- this transaction, or the aggregate's previous row for the first), and
-- decides the head of each aggregate's first row: head when the previous
-- row is resolved (done, or skipped) or there is none, with sent_seq from
-- it. The previous row is read by the UPDATE's own snapshot, taken after
-- the locks (read committed), in which this transaction's rows have no seq
-- yet. Under REPEATABLE READ or SERIALIZABLE that snapshot can be older
-- than the locks: the first row of each aggregate is left undecided (head
-- and prev_seq NULL) for outbox_resolve_heads.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_commit_order() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    from_key text := 'outbox.seq_from_' || TG_RELID;
    from_id  bigint := nullif(current_setting(from_key, true), '')::bigint;
    to_id    bigint := nullif(current_setting('outbox.seq_to_' || TG_RELID, true), '')::bigint;
    decide   boolean := current_setting('transaction_isolation') = 'read committed';
BEGIN
    PERFORM set_config(from_key, '', true);
    IF from_id IS NULL OR to_id IS NULL OR to_id = from_id THEN
        -- One ordered row (NEW, the one that queued this run).
        PERFORM outbox_lock_aggregates(ARRAY[NEW.aggregate_id]);
        UPDATE outbox AS o
           SET seq      = nextval('outbox_seq'),
               prev_seq = CASE WHEN decide THEN p.seq END,
               head     = CASE WHEN decide THEN p.seq IS NULL OR p.status IN ('done', 'skipped') END,
               sent_seq = CASE WHEN decide AND (p.seq IS NULL OR p.status IN ('done', 'skipped'))
                               THEN CASE WHEN p.status = 'done' THEN p.seq ELSE p.sent_seq END END
          FROM (SELECT 1) AS one
          LEFT JOIN (SELECT q.seq, q.status, q.sent_seq
                       FROM outbox AS q
                      WHERE q.ordered AND q.seq IS NOT NULL AND q.aggregate_id = NEW.aggregate_id
                      ORDER BY q.aggregate_id, q.seq DESC
                      LIMIT 1) AS p ON true
         WHERE o.id = NEW.id
           AND o.seq IS NULL;
        RETURN NULL;
    END IF;
    PERFORM outbox_lock_aggregates(ARRAY(
            SELECT u.aggregate_id
              FROM outbox AS u
             WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL));
    -- nextval is evaluated after the ORDER BY of its own subquery level.
    UPDATE outbox AS o
       SET seq      = s.seq,
           prev_seq = CASE WHEN s.before IS NOT NULL THEN s.before WHEN decide THEN p.seq END,
           head     = CASE WHEN s.before IS NOT NULL THEN false
                           WHEN decide THEN p.seq IS NULL OR p.status IN ('done', 'skipped') END,
           sent_seq = CASE WHEN s.before IS NULL AND decide AND (p.seq IS NULL OR p.status IN ('done', 'skipped'))
                           THEN CASE WHEN p.status = 'done' THEN p.seq ELSE p.sent_seq END END
      FROM (SELECT n.id, n.aggregate_id, n.seq,
                   lag(n.seq) OVER (PARTITION BY n.aggregate_id ORDER BY n.seq) AS before
              FROM (SELECT m.id, m.aggregate_id, nextval('outbox_seq') AS seq
                      FROM (SELECT u.id, u.aggregate_id
                              FROM outbox AS u
                             WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
                             ORDER BY u.id) AS m) AS n) AS s
      LEFT JOIN LATERAL (
            SELECT q.seq, q.status, q.sent_seq
              FROM outbox AS q
             WHERE s.before IS NULL
               AND q.ordered AND q.seq IS NOT NULL AND q.aggregate_id = s.aggregate_id
             ORDER BY q.aggregate_id, q.seq DESC
             LIMIT 1) AS p ON true
     WHERE o.id = s.id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- The hand-off as in 00008, now passing the delivered position on: the
-- next head's sent_seq is the resolved head's seq when it was delivered
-- (done), else the resolved head's own sent_seq. A next head that a
-- REPEATABLE READ producer left undecided gets its prev_seq here too.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_head_handoff() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
BEGIN
    PERFORM outbox_lock_aggregates(ARRAY[NEW.aggregate_id]);
    UPDATE outbox
       SET head     = true,
           prev_seq = coalesce(prev_seq, NEW.seq),
           sent_seq = CASE WHEN NEW.status = 'done' THEN NEW.seq ELSE NEW.sent_seq END,
           txid     = pg_current_xact_id()
     WHERE id = (SELECT s.id
                   FROM outbox AS s
                  WHERE s.ordered
                    AND s.seq IS NOT NULL
                    AND s.status IN ('pending', 'processing', 'dead')
                    AND s.aggregate_id = NEW.aggregate_id
                    AND s.seq > NEW.seq
                  ORDER BY s.aggregate_id, s.seq
                  LIMIT 1)
       AND head IS NOT TRUE;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- outbox_resolve_heads as in 00008, stamping prev_seq (the previous row,
-- read after the locks) and, for a head, sent_seq.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_resolve_heads(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    ids bigint[];
    n   integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'deciding heads needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    SELECT array_agg(u.id) INTO ids
      FROM (SELECT u.id
              FROM outbox AS u
             WHERE u.ordered AND u.head IS NULL AND u.seq IS NOT NULL
             ORDER BY u.id
             LIMIT max_rows) AS u;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)));
    UPDATE outbox AS o
       SET head     = (d.prev_seq IS NULL OR d.prev_status IN ('done', 'skipped')),
           prev_seq = d.prev_seq,
           sent_seq = CASE WHEN d.prev_seq IS NULL THEN NULL
                           WHEN d.prev_status = 'done' THEN d.prev_seq
                           WHEN d.prev_status = 'skipped' THEN d.prev_sent END,
           txid     = pg_current_xact_id()
      FROM (SELECT u.id, p.seq AS prev_seq, p.status AS prev_status, p.sent_seq AS prev_sent
              FROM outbox AS u
              LEFT JOIN LATERAL (
                    SELECT p.seq, p.status, p.sent_seq
                      FROM outbox AS p
                     WHERE p.ordered
                       AND p.seq IS NOT NULL
                       AND p.aggregate_id = u.aggregate_id
                       AND p.seq < u.seq
                     ORDER BY p.aggregate_id, p.seq DESC
                     LIMIT 1) AS p ON true
             WHERE u.id = ANY (ids)) AS d
     WHERE o.id = d.id
       AND o.head IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- outbox_repair_unsequenced as in 00008, stamping prev_seq on every row it
-- sequences (the row before it among them, or the aggregate's last row)
-- and sent_seq on the heads it flags (the latest delivered row before
-- them: among the rows it sequences, or what the aggregate's last row
-- says).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_repair_unsequenced(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    ids       bigint[];
    a         record;
    prev      record;
    heads     bigint[] := '{}';
    aggs      text[] := '{}';
    last_seqs bigint[] := '{}';
    last_sent bigint[] := '{}';
    top       bigint := 0;
    n         integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'sequencing rows needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    ids := ARRAY(SELECT u.id FROM outbox AS u WHERE u.ordered AND u.seq IS NULL ORDER BY u.id LIMIT max_rows);
    IF cardinality(ids) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)));
    FOR a IN SELECT u.aggregate_id, min(u.id) FILTER (WHERE u.status NOT IN ('done', 'skipped')) AS first_id
               FROM outbox AS u
              WHERE u.id = ANY (ids) AND u.ordered AND u.seq IS NULL
              GROUP BY u.aggregate_id
    LOOP
        SELECT p.id, p.status, p.seq, p.sent_seq INTO prev
          FROM outbox AS p
         WHERE p.ordered AND p.seq IS NOT NULL AND p.aggregate_id = a.aggregate_id
         ORDER BY p.aggregate_id, p.seq DESC
         LIMIT 1;
        IF FOUND THEN
            top := greatest(top, prev.seq);
            aggs := aggs || a.aggregate_id;
            last_seqs := last_seqs || prev.seq;
            last_sent := last_sent || CASE WHEN prev.status = 'done' THEN prev.seq ELSE prev.sent_seq END;
        END IF;
        IF a.first_id IS NOT NULL AND (NOT FOUND OR prev.status IN ('done', 'skipped')) THEN
            heads := heads || a.first_id;
        END IF;
    END LOOP;
    -- The rows go after every row their aggregates have, even when
    -- outbox_seq is behind them (a copy that did not carry it).
    IF top >= outbox_sequence_next('outbox_seq') THEN
        PERFORM setval('outbox_seq', top);
    END IF;
    UPDATE outbox AS o
       SET seq      = s.seq,
           prev_seq = coalesce(s.before, l.last_seq),
           head     = o.id = ANY (heads),
           sent_seq = CASE WHEN o.id = ANY (heads) THEN coalesce(s.delivered, l.last_sent) END,
           txid     = pg_current_xact_id()
      FROM (SELECT n.id, n.aggregate_id, n.seq,
                   lag(n.seq) OVER w AS before,
                   max(n.seq) FILTER (WHERE n.status = 'done') OVER w AS delivered
              FROM (SELECT m.id, m.aggregate_id, m.status, nextval('outbox_seq') AS seq
                      FROM (SELECT u.id, u.aggregate_id, u.status
                              FROM outbox AS u
                             WHERE u.id = ANY (ids) AND u.ordered AND u.seq IS NULL
                             ORDER BY u.id) AS m) AS n
            WINDOW w AS (PARTITION BY n.aggregate_id ORDER BY n.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS s
      LEFT JOIN unnest(aggs, last_seqs, last_sent) AS l (aggregate_id, last_seq, last_sent)
             ON l.aggregate_id = s.aggregate_id
     WHERE o.id = s.id
       AND o.seq IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;
-- +goose StatementEnd

-- The trigger as in 00008 (queued for the transaction's first ordered row,
-- every ordered row extending the span), its WHEN clause now a call of
-- outbox_commit_span, which keeps the span, instead of the expression that
-- did it inline. PostgreSQL reads a trigger's WHEN clause from the catalog
-- and compiles it again for every statement that inserts: for a producer's
-- one-row INSERT, that expression cost more CPU than the row itself, and
-- unordered rows paid it too (they stop at NEW.ordered, but only after the
-- compilation). One-row INSERTs, one session, commits not waiting for the
-- flush: about 0.7 ms each with it, 0.35 ms with the call, 0.3 ms with no
-- trigger at all, on a shared 2-core machine.
-- +goose StatementBegin
CREATE FUNCTION outbox_commit_span(id bigint, rel oid) RETURNS boolean
    LANGUAGE plpgsql AS $$
DECLARE
    from_key text := 'outbox.seq_from_' || rel;
    to_key   text := 'outbox.seq_to_' || rel;
    from_id  text := current_setting(from_key, true);
BEGIN
    IF coalesce(from_id, '') = '' THEN
        PERFORM set_config(from_key, id::text, true), set_config(to_key, id::text, true);
        RETURN true;
    END IF;
    IF id < from_id::bigint THEN
        PERFORM set_config(from_key, id::text, true);
    ELSIF id > current_setting(to_key)::bigint THEN
        PERFORM set_config(to_key, id::text, true);
    END IF;
    RETURN false;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER outbox_commit_order ON outbox;
CREATE CONSTRAINT TRIGGER outbox_commit_order
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.ordered AND outbox_commit_span(NEW.id, NEW.tableoid))
    EXECUTE FUNCTION outbox_commit_order();

-- The UPDATE triggers as 00005 and 00009 wrote them, now column triggers:
-- the claimable stamp fires for UPDATEs that set status or available_at,
-- the hand-off for UPDATEs that set status. Their WHEN clauses cannot be
-- true otherwise (each needs status or available_at changed), and
-- PostgreSQL skips a column trigger whose columns the UPDATE does not set
-- before it compiles the trigger's WHEN clause, which it does again for
-- every statement: the producer's COMMIT (seq, prev_seq, head, sent_seq)
-- and the hand-off's own UPDATE no longer pay for either clause. (A
-- BEFORE UPDATE trigger of your own that changes status in an UPDATE that
-- does not set it is not seen by the stamp; the relay's sweep
-- (OutboxClaimPassed) still claims such a row.)
DROP TRIGGER outbox_claimable_stamp ON outbox;
CREATE TRIGGER outbox_claimable_stamp
    BEFORE UPDATE OF status, available_at ON outbox
    FOR EACH ROW
    WHEN (NEW.status = 'pending' AND
          (OLD.status IS DISTINCT FROM 'pending' OR NEW.available_at IS DISTINCT FROM OLD.available_at))
    EXECUTE FUNCTION outbox_claimable_stamp();

DROP TRIGGER outbox_head_handoff ON outbox;
CREATE TRIGGER outbox_head_handoff
    AFTER UPDATE OF status ON outbox
    FOR EACH ROW
    WHEN (OLD.ordered AND OLD.head AND NEW.status IN ('done', 'skipped') AND OLD.status NOT IN ('done', 'skipped'))
    EXECUTE FUNCTION outbox_head_handoff();

-- Every function above runs with the search_path pinned to the table's
-- schema (pg_temp last), as 00004 explains; CREATE OR REPLACE resets it.
-- +goose StatementBegin
DO $$
DECLARE
    nsp text := (SELECT n.nspname
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                  WHERE c.oid = 'outbox'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION %s(text[]) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_lock_aggregates'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_commit_order'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(integer) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_repair_unsequenced'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_head_handoff'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(integer) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_resolve_heads'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(bigint, oid) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_commit_span'::regproc, nsp);
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- The functions as 00008 and 00009 left them (00009's head rules: a done
-- or skipped predecessor is resolved), then the columns go.
DROP TRIGGER outbox_head_handoff ON outbox;
CREATE TRIGGER outbox_head_handoff
    AFTER UPDATE ON outbox
    FOR EACH ROW
    WHEN (OLD.ordered AND OLD.head AND NEW.status IN ('done', 'skipped') AND OLD.status NOT IN ('done', 'skipped'))
    EXECUTE FUNCTION outbox_head_handoff();
DROP TRIGGER outbox_claimable_stamp ON outbox;
CREATE TRIGGER outbox_claimable_stamp
    BEFORE UPDATE ON outbox
    FOR EACH ROW
    WHEN (NEW.status = 'pending' AND
          (OLD.status IS DISTINCT FROM 'pending' OR NEW.available_at IS DISTINCT FROM OLD.available_at))
    EXECUTE FUNCTION outbox_claimable_stamp();
DROP TRIGGER outbox_commit_order ON outbox;
CREATE CONSTRAINT TRIGGER outbox_commit_order
    AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.ordered AND
          CASE WHEN coalesce(current_setting('outbox.seq_from_' || NEW.tableoid, true), '') = ''
               THEN set_config('outbox.seq_from_' || NEW.tableoid, NEW.id::text, true) <> ''
                    AND set_config('outbox.seq_to_' || NEW.tableoid, NEW.id::text, true) <> ''
               ELSE (set_config('outbox.seq_from_' || NEW.tableoid,
                                least(current_setting('outbox.seq_from_' || NEW.tableoid)::bigint, NEW.id)::text, true)
                     || set_config('outbox.seq_to_' || NEW.tableoid,
                                   greatest(current_setting('outbox.seq_to_' || NEW.tableoid)::bigint, NEW.id)::text, true)) = '' END)
    EXECUTE FUNCTION outbox_commit_order();
DROP FUNCTION outbox_commit_span(bigint, oid);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_lock_aggregates(aggregate_ids text[]) RETURNS integer
    LANGUAGE plpgsql AS $$
DECLARE
    k bigint;
    n integer := 0;
BEGIN
    FOR k IN SELECT DISTINCT ('outbox'::regclass::oid::bigint << 32) | (hashtext(a)::bigint & 4294967295)
               FROM unnest(aggregate_ids) AS a
              WHERE a IS NOT NULL
              ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(k);
        n := n + 1;
    END LOOP;
    RETURN n;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_commit_order() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    from_key  text := 'outbox.seq_from_' || TG_RELID;
    from_id   bigint := nullif(current_setting(from_key, true), '')::bigint;
    to_id     bigint := nullif(current_setting('outbox.seq_to_' || TG_RELID, true), '')::bigint;
    a         record;
    prev      record;
    heads     bigint[] := '{}';
    undecided bigint[] := '{}';
BEGIN
    PERFORM set_config(from_key, '', true);
    IF from_id IS NULL OR to_id IS NULL OR to_id = from_id THEN
        from_id := NEW.id;
        to_id := NEW.id;
        PERFORM outbox_lock_aggregates(ARRAY[NEW.aggregate_id]);
    ELSE
        PERFORM outbox_lock_aggregates(ARRAY(
                SELECT u.aggregate_id
                  FROM outbox AS u
                 WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL));
    END IF;
    FOR a IN SELECT DISTINCT ON (u.aggregate_id) u.id, u.aggregate_id
               FROM outbox AS u
              WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
              ORDER BY u.aggregate_id, u.id
    LOOP
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            undecided := undecided || a.id;
            CONTINUE;
        END IF;
        SELECT p.id, p.status INTO prev
          FROM outbox AS p
         WHERE p.ordered AND p.seq IS NOT NULL AND p.aggregate_id = a.aggregate_id
         ORDER BY p.aggregate_id, p.seq DESC
         LIMIT 1;
        IF NOT FOUND OR prev.status IN ('done', 'skipped') THEN
            heads := heads || a.id;
        END IF;
    END LOOP;
    UPDATE outbox AS o
       SET seq = s.seq,
           head = CASE WHEN o.id = ANY (undecided) THEN NULL ELSE o.id = ANY (heads) END
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
CREATE OR REPLACE FUNCTION outbox_head_handoff() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
BEGIN
    PERFORM outbox_lock_aggregates(ARRAY[NEW.aggregate_id]);
    UPDATE outbox
       SET head = true,
           txid = pg_current_xact_id()
     WHERE id = (SELECT s.id
                   FROM outbox AS s
                  WHERE s.ordered
                    AND s.seq IS NOT NULL
                    AND s.status IN ('pending', 'processing', 'dead')
                    AND s.aggregate_id = NEW.aggregate_id
                    AND s.seq > NEW.seq
                  ORDER BY s.aggregate_id, s.seq
                  LIMIT 1)
       AND head IS NOT TRUE;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_resolve_heads(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    ids bigint[];
    n   integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'deciding heads needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    SELECT array_agg(u.id) INTO ids
      FROM (SELECT u.id
              FROM outbox AS u
             WHERE u.ordered AND u.head IS NULL AND u.seq IS NOT NULL
             ORDER BY u.id
             LIMIT max_rows) AS u;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)));
    UPDATE outbox AS o
       SET head = (d.prev_id IS NULL OR d.prev_status IN ('done', 'skipped')),
           txid = pg_current_xact_id()
      FROM (SELECT u.id, p.id AS prev_id, p.status AS prev_status
              FROM outbox AS u
              LEFT JOIN LATERAL (
                    SELECT p.id, p.status
                      FROM outbox AS p
                     WHERE p.ordered
                       AND p.seq IS NOT NULL
                       AND p.aggregate_id = u.aggregate_id
                       AND p.seq < u.seq
                     ORDER BY p.aggregate_id, p.seq DESC
                     LIMIT 1) AS p ON true
             WHERE u.id = ANY (ids)) AS d
     WHERE o.id = d.id
       AND o.head IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_repair_unsequenced(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET enable_seqscan = off AS $$
DECLARE
    ids   bigint[];
    a     record;
    prev  record;
    heads bigint[] := '{}';
    top   bigint := 0;
    n     integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'sequencing rows needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    ids := ARRAY(SELECT u.id FROM outbox AS u WHERE u.ordered AND u.seq IS NULL ORDER BY u.id LIMIT max_rows);
    IF cardinality(ids) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)));
    FOR a IN SELECT u.aggregate_id, min(u.id) FILTER (WHERE u.status NOT IN ('done', 'skipped')) AS first_id
               FROM outbox AS u
              WHERE u.id = ANY (ids) AND u.ordered AND u.seq IS NULL
              GROUP BY u.aggregate_id
    LOOP
        SELECT p.id, p.status, p.seq INTO prev
          FROM outbox AS p
         WHERE p.ordered AND p.seq IS NOT NULL AND p.aggregate_id = a.aggregate_id
         ORDER BY p.aggregate_id, p.seq DESC
         LIMIT 1;
        IF FOUND THEN
            top := greatest(top, prev.seq);
        END IF;
        IF a.first_id IS NOT NULL AND (NOT FOUND OR prev.status IN ('done', 'skipped')) THEN
            heads := heads || a.first_id;
        END IF;
    END LOOP;
    IF top >= outbox_sequence_next('outbox_seq') THEN
        PERFORM setval('outbox_seq', top);
    END IF;
    UPDATE outbox AS o
       SET seq = s.seq,
           head = o.id = ANY (heads),
           txid = pg_current_xact_id()
      FROM (SELECT m.id, nextval('outbox_seq') AS seq
              FROM (SELECT u.id
                      FROM outbox AS u
                     WHERE u.id = ANY (ids) AND u.ordered AND u.seq IS NULL
                     ORDER BY u.id) AS m) AS s
     WHERE o.id = s.id
       AND o.seq IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
DECLARE
    nsp text := (SELECT n.nspname
                   FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                  WHERE c.oid = 'outbox'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION %s(text[]) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_lock_aggregates'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_commit_order'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(integer) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_repair_unsequenced'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s() SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_head_handoff'::regproc, nsp);
    EXECUTE format('ALTER FUNCTION %s(integer) SET search_path = %I, pg_catalog, pg_temp',
                   'outbox_resolve_heads'::regproc, nsp);
END;
$$;
-- +goose StatementEnd
ALTER TABLE outbox DROP COLUMN sent_seq, DROP COLUMN prev_seq;
