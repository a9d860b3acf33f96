-- pgoutbox schema at migration 00020: what the numbered migrations in this
-- folder build, in one file. `pgoutbox migrate up` applies it to a database
-- with no migration applied, in one transaction, recording versions 1 to 20;
-- existing databases upgrade through the numbered files. sqlc compiles the
-- queries against it; `make verify` builds the schema both ways and compares.

-- The event, its delivery state and its lease. Ownership that must outlive
-- a claim's COMMIT lives in these columns, never in row locks.
CREATE TABLE outbox (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    status         text        NOT NULL DEFAULT 'pending', -- pending, processing, done, dead, skipped
    available_at   timestamptz NOT NULL DEFAULT now(),  -- earliest next claim (backoff, defer)
    attempts       integer     NOT NULL DEFAULT 0,      -- claims so far; a crash counts too
    lease_owner    text,                                -- for people; correctness is lease_version
    lease_until    timestamptz,                         -- processing past this is re-claimable
    lease_version  bigint      NOT NULL DEFAULT 0,      -- the fencing token: +1 on every claim
    last_error     text,
    done_at        timestamptz,                         -- when it became done, dead or skipped
    headers        jsonb       NOT NULL DEFAULT '{}'::jsonb, -- trace context, content type, tenant
    ordered        boolean     NOT NULL DEFAULT false,  -- deliver in its aggregate's commit order
    seq            bigint,     -- ordered: position in commit order, drawn at COMMIT
    -- The transaction that last made the row claimable (insert, retry, hand-off):
    -- the windowed claims read rows in (txid, id) order up to a snapshot.
    txid           xid8        NOT NULL DEFAULT pg_current_xact_id(),
    head           boolean     DEFAULT false,           -- ordered: first undelivered of its aggregate; NULL = not decided yet
    prev_seq       bigint,     -- ordered: seq of the aggregate's previous event (sent to consumers)
    sent_seq       bigint      -- ordered head: seq of the last event delivered before it
);

-- A processing row always has a lease. NOT VALID: rows written before the
-- check was added are not re-read; every new or updated row is checked.
ALTER TABLE outbox ADD CONSTRAINT outbox_row_valid CHECK (
    status = ANY ('{pending,done,dead,skipped}'::text[])
    OR (status = 'processing' AND lease_until IS NOT NULL AND lease_owner IS NOT NULL)) NOT VALID;

-- Commit order of ordered events: taken at COMMIT under the aggregate's lock.
CREATE SEQUENCE outbox_seq OWNED BY outbox.seq;

-- Unordered claim (OutboxClaimWindow): pending rows in (txid, id) order.
CREATE INDEX outbox_pending_txid ON outbox (txid, id) WHERE status = 'pending' AND NOT ordered;
-- Rows in backoff or deferred, unordered or heads: found when they come due.
CREATE INDEX outbox_due ON outbox (available_at, id)
    WHERE status = 'pending' AND available_at > created_at AND (NOT ordered OR head);
-- Expired-lease recovery, reap and the expired-leases gauge: rows in flight.
CREATE INDEX outbox_leased ON outbox (lease_until) WHERE status = 'processing';
-- Retention and the console's finished counts.
CREATE INDEX outbox_finished ON outbox (status, done_at) INCLUDE (created_at)
    WHERE status IN ('done', 'skipped');
-- Dead list and redrive, keyset-paged by id.
CREATE INDEX outbox_dead ON outbox (id) INCLUDE (event_type, aggregate_type, aggregate_id, created_at)
    WHERE status = 'dead';
-- Ordered claim (OutboxClaimOrderedWindow): claimable heads in (txid, id) order.
CREATE INDEX outbox_ordered_txid ON outbox (txid, id) WHERE ordered AND head AND status = 'pending';
-- An aggregate's undelivered events in commit order: the hand-off, heads, dead heads.
CREATE INDEX outbox_ordered_head ON outbox (aggregate_id, seq) INCLUDE (id, status, created_at)
    WHERE ordered AND seq IS NOT NULL AND status IN ('pending', 'processing', 'dead');
-- An aggregate's latest event, delivered or not: the previous event of a new one.
CREATE INDEX outbox_ordered_seq ON outbox (aggregate_id, seq) WHERE ordered AND seq IS NOT NULL;
-- Ordered rows whose seq or head is not decided yet (the relay's recovery lane).
CREATE INDEX outbox_ordered_unresolved ON outbox (id) WHERE ordered AND (seq IS NULL OR head IS NULL);
-- Dead heads, which block their aggregates, oldest first.
CREATE INDEX outbox_ordered_dead_head ON outbox (created_at, id) INCLUDE (aggregate_id)
    WHERE ordered AND head AND status = 'dead';

-- Attempt history: each failed publish and each operator redelivery, keyed
-- by claim. n is the claim's lease_version; a failure takes slot n % 20
-- (a message keeps the failures of its last 20 claims), operator actions
-- slots 20 to 24. No foreign key: purge deletes the history it orphans.
CREATE TABLE outbox_attempts (
    message_id bigint      NOT NULL,
    slot       integer     NOT NULL,
    n          integer     NOT NULL,
    at         timestamptz NOT NULL DEFAULT now(),
    kind       text        NOT NULL,  -- retry, dead, defer, unavailable, redeliver
    attempt    integer     NOT NULL,  -- outbox.attempts when written
    actor      text,                  -- the relay's lease_owner, or the operator
    error      text,
    answer     text,                  -- what the receiver answered, when known
    PRIMARY KEY (message_id, slot)
);

-- Deliveries per minute, kept by the statements that make rows done, so the
-- console reads a few counters instead of counting done rows.
CREATE TABLE outbox_delivered (
    minute    timestamptz NOT NULL,
    backend   integer     NOT NULL,  -- one row per writing session: no contention
    delivered bigint      NOT NULL,
    PRIMARY KEY (minute, backend)
);

-- Relays that run or ran against this table, for the fleet view.
CREATE TABLE outbox_relays (
    owner_prefix     text        PRIMARY KEY,
    owner            text        NOT NULL,
    host text NOT NULL DEFAULT '', pid integer NOT NULL DEFAULT 0, version text NOT NULL DEFAULT '',
    started_at       timestamptz NOT NULL DEFAULT now(),
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    in_flight        integer     NOT NULL DEFAULT 0,
    last_claim_at timestamptz, last_finalize_at timestamptz, stopped_at timestamptz
);

-- Ordered events committed and not yet decided by the relay: the seq each
-- drew at COMMIT (outbox_commit_order), moved into the event and deleted
-- by outbox_decide_committed. Normally a few rows.
CREATE TABLE outbox_sequenced (
    seq        bigint PRIMARY KEY,
    message_id bigint NOT NULL
);

-- Takes the transaction-level advisory lock of each aggregate, once each and
-- in key order, so two takers never wait on each other in a cycle. Key:
-- (table oid << 32) | hashtext(aggregate_id).
CREATE FUNCTION outbox_lock_aggregates(aggregate_ids text[]) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    k bigint; n integer := 0;
BEGIN
    IF cardinality(aggregate_ids) = 1 THEN
        IF aggregate_ids[1] IS NULL THEN RETURN 0; END IF;
        PERFORM pg_advisory_xact_lock(('outbox'::regclass::oid::bigint << 32) | (hashtext(aggregate_ids[1])::bigint & 4294967295));
        RETURN 1;
    END IF;
    FOR k IN SELECT DISTINCT ('outbox'::regclass::oid::bigint << 32) | (hashtext(a)::bigint & 4294967295)
               FROM unnest(aggregate_ids) AS a WHERE a IS NOT NULL ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(k);
        n := n + 1;
    END LOOP;
    RETURN n;
END;
$$;

-- The value a sequence hands out next, without taking it.
CREATE FUNCTION outbox_sequence_next(seq regclass) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    EXECUTE format('SELECT CASE WHEN s.is_called THEN s.last_value + 1 ELSE s.last_value END FROM %s AS s', seq) INTO n;
    RETURN n;
END;
$$;

-- WHEN clause of outbox_commit_order: true for the first ordered row a
-- transaction inserts, which queues one run at COMMIT; later rows only
-- widen the transaction's id span in transaction-local settings.
CREATE FUNCTION outbox_commit_span(id bigint, rel oid) RETURNS boolean LANGUAGE plpgsql AS $$
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

-- At COMMIT (a deferred constraint trigger): the transaction's ordered rows
-- take the next values of outbox_seq under their aggregates' locks, so seq
-- is commit order per aggregate, and each gets one narrow row in
-- outbox_sequenced; the event itself is not updated. The relay decides the
-- rest (outbox_resolve_heads).
CREATE FUNCTION outbox_commit_order() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off AS $$
DECLARE
    from_key text := 'outbox.seq_from_' || TG_RELID;
    from_id  bigint := nullif(current_setting(from_key, true), '')::bigint;
    to_id    bigint := nullif(current_setting('outbox.seq_to_' || TG_RELID, true), '')::bigint;
BEGIN
    PERFORM set_config(from_key, '', true);
    IF from_id IS NULL OR to_id IS NULL OR to_id = from_id THEN
        -- One ordered row (NEW, the one that queued this run).
        PERFORM outbox_lock_aggregates(ARRAY[NEW.aggregate_id]);
        INSERT INTO outbox_sequenced (seq, message_id) VALUES (nextval('outbox_seq'), NEW.id);
        RETURN NULL;
    END IF;
    -- The transaction's own ordered rows in its id span (other transactions'
    -- rows in the span carry their own txid).
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u
                                          WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
                                            AND u.txid = pg_current_xact_id()));
    -- nextval is evaluated after the ORDER BY of the subquery below it.
    INSERT INTO outbox_sequenced (seq, message_id)
    SELECT nextval('outbox_seq'), m.id
      FROM (SELECT u.id FROM outbox AS u
             WHERE u.id BETWEEN from_id AND to_id AND u.ordered AND u.seq IS NULL
               AND u.txid = pg_current_xact_id()
             ORDER BY u.id) AS m;
    RETURN NULL;
END;
$$;

-- When a head becomes done or skipped, the next undelivered event of its
-- aggregate in seq order becomes the head (txid restamped: the windowed
-- ordered claim sees it as newly claimable).
CREATE FUNCTION outbox_head_handoff() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off AS $$
BEGIN
    PERFORM outbox_lock_aggregates(ARRAY[NEW.aggregate_id]);
    UPDATE outbox
       SET head     = true,
           prev_seq = coalesce(prev_seq, NEW.seq),
           sent_seq = CASE WHEN NEW.status = 'done' THEN NEW.seq ELSE NEW.sent_seq END,
           txid     = pg_current_xact_id()
     WHERE id = (SELECT s.id
                   FROM outbox AS s
                  WHERE s.ordered AND s.seq IS NOT NULL AND s.status IN ('pending', 'processing', 'dead')
                    AND s.aggregate_id = NEW.aggregate_id AND s.seq > NEW.seq
                  ORDER BY s.aggregate_id, s.seq LIMIT 1)
       AND head IS NOT TRUE;
    RETURN NULL;
END;
$$;

-- A row that becomes pending again (retry, defer, redrive) is stamped with
-- the transaction that did it, so the windowed claims see it.
CREATE FUNCTION outbox_claimable_stamp() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    NEW.txid := pg_current_xact_id();
    RETURN NEW;
END;
$$;

-- The relay, before each ordered claim: moves rows of outbox_sequenced into
-- their events, lowest seq first (an aggregate's rows show in seq order),
-- under the aggregates' locks, deciding prev_seq, head and sent_seq.
-- after_seq is the caller's floor, below which no row is left: deleted rows
-- stay in the index as dead entries while an old snapshot is held, and
-- reading from the floor keeps the cost flat. seen_seq and seen_holders are
-- the previous call's last seq drawn and the transactions then holding an
-- aggregate's lock: once none of them runs, every seq up to seen_seq shows.
CREATE FUNCTION outbox_decide_committed(max_rows integer, INOUT after_seq bigint, INOUT seen_seq bigint,
                                        INOUT seen_holders text[], OUT decided integer)
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off SET jit = off AS $$
DECLARE
    last_seq bigint := coalesce(pg_sequence_last_value('outbox_seq'), 0);
    settled  boolean; seqs bigint[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'deciding heads needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    decided := 0;
    IF last_seq < after_seq THEN after_seq := 0; seen_seq := 0; END IF; -- outbox_seq went back: start over
    IF NOT EXISTS (SELECT FROM outbox_sequenced AS s WHERE s.seq > after_seq) THEN RETURN; END IF;
    settled := seen_seq > after_seq AND NOT EXISTS (
        SELECT FROM pg_catalog.pg_locks AS l WHERE l.locktype = 'virtualxid' AND l.virtualxid = ANY (seen_holders));
    seqs := ARRAY(SELECT s.seq FROM outbox_sequenced AS s WHERE s.seq > after_seq ORDER BY s.seq LIMIT max_rows);
    IF cardinality(seqs) > 0 THEN
        PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox_sequenced AS s
                                               JOIN outbox AS u ON u.id = s.message_id WHERE s.seq = ANY (seqs)));
        -- Read after the locks. A head is the first undelivered row taken of its
        -- aggregate, p (the latest decided row below) done, skipped or none.
        WITH taken AS (
            DELETE FROM outbox_sequenced AS s WHERE s.seq = ANY (seqs) RETURNING s.seq, s.message_id
        ), b AS (
            SELECT u.id, u.aggregate_id, t.seq, lag(t.seq) OVER w AS before,
                   u.status IN ('pending', 'processing', 'dead')
                     AND count(*) FILTER (WHERE u.status IN ('pending', 'processing', 'dead')) OVER a = 0 AS first,
                   max(t.seq) FILTER (WHERE u.status = 'done') OVER a AS delivered
              FROM taken AS t JOIN outbox AS u ON u.id = t.message_id
             WHERE u.ordered AND u.seq IS NULL
            WINDOW w AS (PARTITION BY u.aggregate_id ORDER BY t.seq),
                   a AS (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
        ), d AS (
            SELECT b.id, b.seq, coalesce(b.before, p.seq) AS prev_seq,
                   b.first AND (p.seq IS NULL OR p.status IN ('done', 'skipped')) AS head,
                   coalesce(b.delivered, CASE WHEN p.status = 'done' THEN p.seq ELSE p.sent_seq END) AS sent_seq
              FROM b
              LEFT JOIN LATERAL (
                    SELECT q.seq, q.status, q.sent_seq
                      FROM outbox AS q
                     WHERE q.ordered AND q.seq IS NOT NULL AND q.aggregate_id = b.aggregate_id AND q.seq < b.seq
                     ORDER BY q.aggregate_id, q.seq DESC LIMIT 1) AS p ON true
        )
        UPDATE outbox AS o
           SET seq = d.seq, prev_seq = d.prev_seq, head = d.head,
               sent_seq = CASE WHEN d.head THEN d.sent_seq END, txid = pg_current_xact_id()
          FROM d
         WHERE o.id = d.id;
        GET DIAGNOSTICS decided = ROW_COUNT;
    END IF;
    IF settled AND (cardinality(seqs) < max_rows OR seqs[max_rows] >= seen_seq) THEN
        after_seq := seen_seq;
    END IF;
    seen_seq := last_seq;
    seen_holders := ARRAY(SELECT l.virtualtransaction FROM pg_catalog.pg_locks AS l
                           WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.classid = 'outbox'::regclass::oid
                             AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
                             AND l.pid <> pg_backend_pid());
END;
$$;

-- outbox_decide_committed from no floor, for callers that keep none.
CREATE FUNCTION outbox_resolve_heads(max_rows integer) RETURNS integer
    LANGUAGE sql SECURITY DEFINER AS $$
    SELECT d.decided FROM outbox_decide_committed(max_rows, 0, 0, '{}') AS d;
$$;

-- Sequences ordered rows that never got a seq (copied in without their
-- COMMIT trigger: a restore, a logical copy), in id order, after every row
-- their aggregates already have; the relay then decides them as any other.
CREATE FUNCTION outbox_repair_unsequenced(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off SET jit = off AS $$
DECLARE
    ids bigint[]; top bigint; n integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'sequencing rows needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    ids := ARRAY(SELECT u.id FROM outbox AS u WHERE u.ordered AND u.seq IS NULL
                    AND NOT EXISTS (SELECT FROM outbox_sequenced AS s WHERE s.seq > 0 AND s.message_id = u.id)
                  ORDER BY u.id LIMIT max_rows);
    IF cardinality(ids) = 0 THEN RETURN 0; END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)));
    -- The rows go after every row their aggregates already have, even when
    -- outbox_seq is behind them (a copy that did not carry it).
    top := (SELECT max(l.seq)
              FROM (SELECT DISTINCT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)) AS a
             CROSS JOIN LATERAL (SELECT p.seq FROM outbox AS p
                                  WHERE p.ordered AND p.seq IS NOT NULL AND p.aggregate_id = a.aggregate_id
                                  ORDER BY p.aggregate_id, p.seq DESC LIMIT 1) AS l);
    IF top >= outbox_sequence_next('outbox_seq') THEN
        PERFORM setval('outbox_seq', top);
    END IF;
    INSERT INTO outbox_sequenced (seq, message_id)
    SELECT nextval('outbox_seq'), m.id
      FROM (SELECT u.id FROM outbox AS u
             WHERE u.id = ANY (ids) AND u.ordered AND u.seq IS NULL
               AND NOT EXISTS (SELECT FROM outbox_sequenced AS s WHERE s.seq > 0 AND s.message_id = u.id)
             ORDER BY u.id) AS m;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;

-- Moves outbox's id sequence and outbox_seq past the rows (after a restore
-- or a copy that did not carry them); returns how many were behind.
CREATE FUNCTION outbox_repair_sequences(check_only boolean, scan_all boolean) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    ids regclass := pg_get_serial_sequence('outbox', 'id')::regclass;
    top_id bigint; top_seq bigint; next_id bigint; behind integer := 0;
BEGIN
    -- The rows first, the sequences after: a sequence only moves forward, so
    -- a value read after the rows is never behind them unless it really is.
    top_id := (SELECT max(o.id) FROM outbox AS o);
    top_seq := (SELECT max(r.seq) FROM (SELECT o.seq, o.ordered FROM outbox AS o ORDER BY o.id DESC LIMIT 1000) AS r
                 WHERE r.ordered);
    IF scan_all OR top_seq >= outbox_sequence_next('outbox_seq') THEN
        top_seq := (SELECT max(o.seq) FROM outbox AS o WHERE o.ordered);
    END IF;
    top_seq := greatest(top_seq, (SELECT max(s.seq) FROM outbox_sequenced AS s));
    next_id := outbox_sequence_next(ids);
    IF top_id >= next_id THEN
        behind := behind + 1;
        IF NOT check_only THEN PERFORM setval(ids, greatest(top_id, outbox_sequence_next(ids) - 1)); END IF;
    END IF;
    IF top_seq >= outbox_sequence_next('outbox_seq') THEN
        behind := behind + 1;
        IF NOT check_only THEN PERFORM setval('outbox_seq', greatest(top_seq, outbox_sequence_next('outbox_seq') - 1)); END IF;
    END IF;
    RETURN behind;
END;
$$;

-- Adds deliveries to the current session's counters of their minutes, in
-- the statement that made the rows done, and drops counters older than two
-- hours when it starts a new minute.
CREATE FUNCTION outbox_delivered_add(minutes timestamptz[], deltas bigint[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    keep    timestamptz := date_trunc('minute', now()) - interval '2 hours';
    started boolean;
BEGIN
    WITH d AS (
        SELECT u.minute, sum(u.delta) AS delta FROM unnest(minutes, deltas) AS u (minute, delta)
         WHERE u.minute >= keep GROUP BY u.minute HAVING sum(u.delta) <> 0
    ), up AS (
        INSERT INTO outbox_delivered AS c (minute, backend, delivered)
        SELECT d.minute, pg_backend_pid(), d.delta FROM d
        ON CONFLICT (minute, backend) DO UPDATE SET delivered = c.delivered + excluded.delivered
        RETURNING (c.xmax = 0) AS inserted
    )
    SELECT coalesce(bool_or(up.inserted), false) INTO started FROM up;
    IF started THEN
        DELETE FROM outbox_delivered AS c
         WHERE c.ctid = ANY (ARRAY(SELECT o.ctid FROM outbox_delivered AS o WHERE o.minute < keep FOR UPDATE SKIP LOCKED));
    END IF;
END;
$$;

-- Rebuilds the delivery counters from the table (`pgoutbox repair`).
CREATE FUNCTION outbox_delivered_rebuild() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    LOCK TABLE outbox IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM outbox_delivered;
    INSERT INTO outbox_delivered (minute, backend, delivered)
    SELECT date_trunc('minute', o.done_at), 0, count(*)
      FROM outbox AS o
     WHERE o.status = 'done' AND o.done_at >= date_trunc('minute', now()) - interval '2 hours'
     GROUP BY 1;
    SELECT coalesce(sum(delivered), 0) INTO n FROM outbox_delivered;
    RETURN n;
END;
$$;

-- The only trigger on INSERT: one run per transaction that inserts ordered rows.
CREATE CONSTRAINT TRIGGER outbox_commit_order AFTER INSERT ON outbox
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.ordered AND outbox_commit_span(NEW.id, NEW.tableoid)) EXECUTE FUNCTION outbox_commit_order();

CREATE TRIGGER outbox_head_handoff AFTER UPDATE OF status ON outbox FOR EACH ROW
    WHEN (OLD.ordered AND OLD.head AND NEW.status IN ('done', 'skipped') AND OLD.status NOT IN ('done', 'skipped'))
    EXECUTE FUNCTION outbox_head_handoff();

CREATE TRIGGER outbox_claimable_stamp BEFORE UPDATE OF status, available_at ON outbox FOR EACH ROW
    WHEN (NEW.status = 'pending' AND (OLD.status IS DISTINCT FROM 'pending' OR NEW.available_at IS DISTINCT FROM OLD.available_at))
    EXECUTE FUNCTION outbox_claimable_stamp();

-- Every function that names the table runs with search_path pinned to the
-- table's schema and pg_temp last: a session's temporary objects never stand
-- in for the outbox or its sequence, least of all with the owner's rights.
DO $$
DECLARE
    nsp text := (SELECT n.nspname FROM pg_catalog.pg_class AS c
                   JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace WHERE c.oid = 'outbox'::regclass);
    f   regproc;
BEGIN
    FOREACH f IN ARRAY ARRAY['outbox_lock_aggregates'::regproc, 'outbox_sequence_next'::regproc,
            'outbox_commit_order'::regproc, 'outbox_head_handoff'::regproc, 'outbox_resolve_heads'::regproc,
            'outbox_decide_committed'::regproc, 'outbox_repair_unsequenced'::regproc, 'outbox_repair_sequences'::regproc,
            'outbox_delivered_add'::regproc, 'outbox_delivered_rebuild'::regproc] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_catalog, pg_temp', f, nsp);
    END LOOP;
END;
$$;
