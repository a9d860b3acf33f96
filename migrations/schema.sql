-- pgoutbox schema at migration 00019: what the numbered migrations in this
-- folder build, in one file. `pgoutbox migrate up` applies it to a database
-- with no migration applied, in one transaction, recording versions 1 to 19;
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
    seq            bigint,     -- ordered: position in commit order, stamped at COMMIT
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
-- is commit order per aggregate. In READ COMMITTED the trigger also decides
-- each row's head, prev_seq and sent_seq from the aggregate's latest row;
-- otherwise head stays NULL and outbox_resolve_heads decides it later.
CREATE FUNCTION outbox_commit_order() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off AS $$
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
                      ORDER BY q.aggregate_id, q.seq DESC LIMIT 1) AS p ON true
         WHERE o.id = NEW.id AND o.seq IS NULL;
        RETURN NULL;
    END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u
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
             WHERE s.before IS NULL AND q.ordered AND q.seq IS NOT NULL AND q.aggregate_id = s.aggregate_id
             ORDER BY q.aggregate_id, q.seq DESC LIMIT 1) AS p ON true
     WHERE o.id = s.id;
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

-- The relay's recovery lane: decides head, prev_seq and sent_seq of ordered
-- rows sequenced outside READ COMMITTED (head IS NULL), oldest first.
CREATE FUNCTION outbox_resolve_heads(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off AS $$
DECLARE
    ids bigint[]; n integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'deciding heads needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    SELECT array_agg(u.id) INTO ids
      FROM (SELECT u.id FROM outbox AS u WHERE u.ordered AND u.head IS NULL AND u.seq IS NOT NULL
             ORDER BY u.id LIMIT max_rows) AS u;
    IF ids IS NULL THEN RETURN 0; END IF;
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
                     WHERE p.ordered AND p.seq IS NOT NULL
                       AND p.aggregate_id = u.aggregate_id AND p.seq < u.seq
                     ORDER BY p.aggregate_id, p.seq DESC LIMIT 1) AS p ON true
             WHERE u.id = ANY (ids)) AS d
     WHERE o.id = d.id AND o.head IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END;
$$;

-- Sequences ordered rows that never got a seq (copied in without their
-- COMMIT trigger: a restore, a logical copy), in id order, after every row
-- their aggregates already have.
CREATE FUNCTION outbox_repair_unsequenced(max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER SET enable_seqscan = off AS $$
DECLARE
    ids bigint[]; a record; prev record;
    heads bigint[] := '{}'; aggs text[] := '{}'; last_seqs bigint[] := '{}'; last_sent bigint[] := '{}';
    top bigint := 0; n integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'sequencing rows needs read committed, not %', current_setting('transaction_isolation');
    END IF;
    ids := ARRAY(SELECT u.id FROM outbox AS u WHERE u.ordered AND u.seq IS NULL ORDER BY u.id LIMIT max_rows);
    IF cardinality(ids) = 0 THEN RETURN 0; END IF;
    PERFORM outbox_lock_aggregates(ARRAY(SELECT u.aggregate_id FROM outbox AS u WHERE u.id = ANY (ids)));
    FOR a IN SELECT u.aggregate_id, min(u.id) FILTER (WHERE u.status NOT IN ('done', 'skipped')) AS first_id
               FROM outbox AS u WHERE u.id = ANY (ids) AND u.ordered AND u.seq IS NULL GROUP BY u.aggregate_id
    LOOP
        SELECT p.id, p.status, p.seq, p.sent_seq INTO prev
          FROM outbox AS p WHERE p.ordered AND p.seq IS NOT NULL AND p.aggregate_id = a.aggregate_id
         ORDER BY p.aggregate_id, p.seq DESC LIMIT 1;
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
     WHERE o.id = s.id AND o.seq IS NULL;
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
            'outbox_repair_unsequenced'::regproc, 'outbox_repair_sequences'::regproc,
            'outbox_delivered_add'::regproc, 'outbox_delivered_rebuild'::regproc] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_catalog, pg_temp', f, nsp);
    END LOOP;
END;
$$;
