-- pgoutbox-migration: 00001_outbox.sql
-- +goose Up
-- The outbox table: the event, its delivery state (status, available_at,
-- attempts) and the lease that fences every write after a claim
-- (lease_owner, lease_until, lease_version), plus three columns that features
-- need (each explained where it is declared).
CREATE TABLE outbox (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),

    -- Dispatcher columns. Ownership that must outlive the claim's COMMIT lives
    -- here, not in row locks.
    status         text        NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'processing', 'done', 'dead')),
    available_at   timestamptz NOT NULL DEFAULT now(),  -- earliest next claim (backoff, defer)
    attempts       integer     NOT NULL DEFAULT 0,      -- claims so far; a crash counts too
    lease_owner    text,                                -- for people; correctness is lease_version
    lease_until    timestamptz,                         -- processing past this is re-claimable
    lease_version  bigint      NOT NULL DEFAULT 0,      -- the fencing token: +1 on every claim
    last_error     text,
    done_at        timestamptz,

    -- headers: transport metadata (trace context, content type, tenant) that
    -- publishers forward next to the payload. Empty object by default.
    headers        jsonb       NOT NULL DEFAULT '{}'::jsonb,

    -- ordered: the producer asks for per-aggregate order for this event
    -- (OutboxClaimOrdered hands out only the head of each aggregate; the
    -- plain OutboxClaim never touches ordered rows). Defaults to unordered.
    ordered        boolean     NOT NULL DEFAULT false,

    -- xid: the inserting transaction. Ordered delivery uses (xid, id) as the
    -- order within an aggregate and treats a row as a head only once every
    -- transaction that could still commit an earlier row has finished; see
    -- OutboxClaimOrdered. The default assigns it without producer help.
    xid            xid8        NOT NULL DEFAULT pg_current_xact_id(),

    CONSTRAINT outbox_lease_consistent CHECK (
        status <> 'processing' OR (lease_until IS NOT NULL AND lease_owner IS NOT NULL))
);

-- Unordered claim: pending rows first-come by id. Partial, so the size of the
-- index (and the cost of a claim) does not grow with retained done/dead rows.
-- available_at is a key column so rows in backoff are skipped inside the index
-- without visiting the heap.
CREATE INDEX outbox_pending ON outbox (id, available_at)
    WHERE status = 'pending' AND NOT ordered;

-- Expired-lease recovery, reap and the expired-leases gauge (partial: only rows in flight).
CREATE INDEX outbox_leased ON outbox (lease_until)
    WHERE status = 'processing';

-- Ordered claim: the first entry per aggregate_id is that aggregate's head in
-- (xid, id) order. It holds every undelivered ordered row, dead included (a
-- dead head blocks its aggregate), and never a done row.
CREATE INDEX outbox_ordered_head ON outbox (aggregate_id, xid, id)
    WHERE ordered AND status IN ('pending', 'processing', 'dead');

-- Dead list and redrive, keyset-paged by id.
CREATE INDEX outbox_dead ON outbox (id)
    WHERE status = 'dead';

-- +goose Down
DROP TABLE outbox;
