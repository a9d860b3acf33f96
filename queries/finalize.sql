-- Finalizes. Every write after a claim is fenced: it changes the row only if
-- the row is still processing under the claim's fencing token, the pair
-- (lease_owner, lease_version) the claim wrote. A worker whose lease expired
-- and was taken over (lease_version moved on) gets 0 rows and must not touch
-- the row; a worker whose lease expired but was NOT taken over still
-- succeeds, because what decides is the generation, not the clock.
-- Why the owner too: lease_version alone is unique only while the history of
-- the row is. After a failover to an asynchronous standby that never
-- received the last claims, the row is back at an older lease_version, and
-- the next claim hands the same lease_version out again. The dispatcher
-- writes a lease_owner unique to each claim (owner name, a random run id and
-- a claim number), so the old claim's token still does not match and its
-- writes get 0 rows. Fencing protects the database state only: the message
-- may already have been published, so downstream deduplicates by outbox id.
-- The relay finalizes in batches: each row of a batch carries its own token
-- in parallel arrays, and is written only when, for that row alone,
--   id = @id AND status = 'processing' AND lease_version = @lease_version
--   AND lease_owner = @lease_owner
-- holds (the single-row rule, applied per element); a row that does not
-- match is left as it is and missing from the result: its lease was lost.
-- Lock strategy for all: one UPDATE by primary key over the unnest of the
-- batch.

-- OutboxMarkDoneMany finalizes a batch of successful publishes in one
-- statement, each row still fenced by its own token (@ids, @lease_versions
-- and @lease_owners are parallel arrays).
-- Access path: one primary-key lookup per id (a nested loop over the unnest),
-- so the cost is O(batch). The expected status comes in through f.status on
-- purpose: written as the literal o.status = 'processing' it lets the planner
-- drive the join from the partial index outbox_leased, whose statistics
-- nearly always say "about 0 rows", and the cached generic plan then
-- compares every row in flight with every id of the batch (measured: 86 ms
-- instead of 6 ms for 500 ids with 1,000 rows in flight; see BENCHMARKS.md).
-- The rows made done are counted in the current minute's deliveries
-- (outbox_delivered_add, migration 00018: one upsert per statement into
-- this connection's counter row).
-- Returns the ids actually finalized, as one array (one row to send and
-- decode instead of one per message); an id missing
-- from it lost its lease. Never NULL: empty when none was finalized.
-- Lock strategy: the ordered rows' aggregate locks first (handoff_locks,
-- pg_advisory_xact_lock in key order), then one UPDATE by primary key per id.
-- name: OutboxMarkDoneMany :one
WITH handoff_locks AS (
    -- The head hand-off (migration 00005) locks each ordered row's
    -- aggregate; taken here first, all at once and in key order through
    -- outbox_lock_aggregates (migration 00008, as producers' COMMITs take
    -- them), so a batch can never deadlock with a producer that writes two
    -- of its aggregates, or with another batch.
    -- @unordered_only = true (the caller knows the batch holds no ordered
    -- row) skips the lookups: 3.7 ms per batch of 2,000 unordered rows.
    -- Its zero value takes the locks, the safe side.
    SELECT outbox_lock_aggregates(ARRAY(
            SELECT l.aggregate_id
              FROM outbox AS l
             WHERE l.id = ANY (@ids::bigint[])
               AND l.ordered
               AND NOT @unordered_only::boolean)) AS n
),
done AS (
    UPDATE outbox AS o
       SET status      = 'done',
           done_at     = now(),
           last_error  = NULL,
           lease_owner = NULL,
           lease_until = NULL
      FROM (SELECT unnest(@ids::bigint[])            AS id,
                   unnest(@lease_versions::bigint[]) AS lease_version,
                   unnest(@lease_owners::text[])     AS lease_owner,
                   'processing'::text                AS status) AS f
     WHERE o.id = f.id
       AND o.status = f.status
       AND o.lease_version = f.lease_version
       AND o.lease_owner = f.lease_owner
       AND (SELECT n FROM handoff_locks) >= 0
    RETURNING o.id
),
counted AS (
    SELECT outbox_delivered_add(ARRAY[date_trunc('minute', now())], ARRAY[count(*)]) FROM done
)
SELECT coalesce(array_agg(done.id), '{}')::bigint[] AS ids
  FROM done
HAVING (SELECT count(*) FROM counted) >= 0;

-- OutboxFinalizeMany writes the outcomes of a batch of claimed messages in
-- one statement, each row fenced by its own token like every write after a
-- claim (@ids, @lease_versions, @lease_owners, @outcomes, @delays_us and
-- @errors are parallel arrays). It is the dispatcher's one writer for
-- failures and hand-backs, next to OutboxMarkDoneMany for batches that only
-- succeeded, so that a failing receiver costs a statement per batch, not a
-- transaction per message. Each row's outcome is one of:
-- * 'done': delivered (as OutboxMarkDoneMany; an ordered row hands its
--   aggregate on, under the aggregate's advisory lock, see below);
-- * 'retry': a failure of the message: pending at now() + its delay, the
--   attempt spent, @errors in last_error;
-- * 'defer': a business defer: pending at now() + its delay with the attempt
--   refunded and 'deferred: ' || its error in last_error, or dead once the
--   message is older than @max_defer_age (created_at, database clock), so
--   that defers cannot last forever;
-- * 'dead': for a person to look at (a permanent failure, or retries
--   exhausted), @errors in last_error; in an ordered aggregate a dead head
--   blocks the aggregate until someone redrives or skips it;
-- * 'release': handed back with the attempt refunded, pending at now() +
--   its delay: claimed but never started (shutdown, a lease too close to
--   expiry), or a publish that found the receiver or broker unavailable,
--   which is no failure of the message. An empty error keeps last_error.
-- Errors are truncated to 500 characters.
-- The attempt history (outbox_attempts, migration 00011): a row whose
-- @history is not empty ('retry', 'defer', 'unavailable', or 'dead', which
-- the statement records as 'dead' too when a retry or defer made the message
-- dead) gets an entry in the same statement, only if its own write matched
-- (fenced like it): its time, the claim (lease_owner; n is its
-- lease_version), the attempt, its error and @answers (the receiver's
-- answer; '' for none), in slot n % 20, overwriting the failure of claim
-- n - 20: one row written per failed publish and nothing read (a lookup of
-- the message's entries, measured, doubled the statement's time), nothing
-- for a delivered row.
-- Access path: one primary-key lookup per id, as OutboxMarkDoneMany (and
-- f.status for the same reason); outbox_attempts by its primary key.
-- Returns the ids written and, in the same order, the status each got
-- ('done', 'pending' or 'dead'): a missing id lost its lease. Never NULL:
-- empty arrays when nothing was written.
-- Lock strategy: the aggregate locks of the ordered rows that become done
-- first (in key order), then one UPDATE by primary key per id, and
-- outbox_attempts upserted by its primary key.
-- name: OutboxFinalizeMany :one
WITH handoff_locks AS (
    -- As OutboxMarkDoneMany: the aggregates of the ordered rows that become
    -- done, locked first, all at once and in key order through
    -- outbox_lock_aggregates. @unordered_only = true (the caller knows no
    -- ordered row becomes done) skips the lookups.
    SELECT outbox_lock_aggregates(ARRAY(
            SELECT l.aggregate_id
              FROM outbox AS l
             WHERE l.id = ANY (ARRAY(SELECT (@ids::bigint[])[i]
                                       FROM generate_subscripts(@outcomes::text[], 1) AS i
                                      WHERE (@outcomes::text[])[i] = 'done'))
               AND l.ordered
               AND NOT @unordered_only::boolean)) AS n
),
written AS (
    UPDATE outbox AS o
       SET status       = CASE
                              WHEN f.outcome IN ('done', 'dead') THEN f.outcome
                              WHEN f.outcome = 'defer' AND o.created_at < now() - @max_defer_age::interval THEN 'dead'
                              ELSE 'pending'
                          END,
           done_at      = CASE WHEN f.outcome = 'done' THEN now() ELSE o.done_at END,
           available_at = CASE
                              WHEN f.outcome IN ('done', 'dead') THEN o.available_at
                              WHEN f.outcome = 'defer' AND o.created_at < now() - @max_defer_age::interval THEN o.available_at
                              ELSE now() + f.delay_us * interval '1 microsecond'
                          END,
           last_error   = CASE f.outcome
                              WHEN 'done' THEN NULL
                              WHEN 'release' THEN coalesce(nullif(left(f.error, 500), ''), o.last_error)
                              WHEN 'defer' THEN left(CASE WHEN o.created_at < now() - @max_defer_age::interval
                                                          THEN 'deferred past max age: ' || f.error
                                                          ELSE 'deferred: ' || f.error END, 500)
                              ELSE left(f.error, 500)
                          END,
           attempts     = o.attempts - CASE WHEN f.outcome IN ('defer', 'release') THEN 1 ELSE 0 END,
           lease_owner  = NULL,
           lease_until  = NULL
      FROM (SELECT unnest(@ids::bigint[])            AS id,
                   unnest(@lease_versions::bigint[]) AS lease_version,
                   unnest(@lease_owners::text[])     AS lease_owner,
                   unnest(@outcomes::text[])         AS outcome,
                   unnest(@delays_us::bigint[])      AS delay_us,
                   unnest(@errors::text[])           AS error,
                   unnest(@history::text[])          AS history,
                   unnest(@answers::text[])          AS answer,
                   'processing'::text                AS status) AS f
     WHERE o.id = f.id
       AND o.status = f.status
       AND o.lease_version = f.lease_version
       AND o.lease_owner = f.lease_owner
       AND f.outcome IN ('done', 'retry', 'defer', 'dead', 'release')
       AND (SELECT n FROM handoff_locks) >= 0
    RETURNING o.id, o.status, o.attempts, o.last_error, f.history, f.answer, f.lease_owner, f.lease_version, f.outcome
),
history AS (
    INSERT INTO outbox_attempts AS h (message_id, slot, n, at, kind, attempt, actor, error, answer)
    SELECT w.id, (w.lease_version % 20)::integer, w.lease_version::integer, now(),
           CASE WHEN w.status = 'dead' THEN 'dead' ELSE w.history END,
           w.attempts + CASE WHEN w.outcome IN ('defer', 'release') THEN 1 ELSE 0 END,
           w.lease_owner, w.last_error, nullif(left(w.answer, 500), '')
      FROM written AS w
     WHERE w.history <> ''
    ON CONFLICT (message_id, slot) DO UPDATE
       SET n = excluded.n, at = excluded.at, kind = excluded.kind, attempt = excluded.attempt,
           actor = excluded.actor, error = excluded.error, answer = excluded.answer
),
counted AS (
    -- The rows made done, in the current minute's deliveries (migration
    -- 00018), as OutboxMarkDoneMany counts them.
    SELECT outbox_delivered_add(ARRAY[date_trunc('minute', now())], ARRAY[count(*)])
      FROM written
     WHERE written.status = 'done'
)
SELECT coalesce(array_agg(written.id), '{}')::bigint[] AS ids,
       coalesce(array_agg(written.status), '{}')::text[] AS statuses
  FROM written
HAVING (SELECT count(*) FROM counted) >= 0;
