-- Relays (migration 00012): each relay process records itself in
-- outbox_relays at a low rate (Config.RelayInterval), never on the
-- per-message path; the console's relays page and `pgoutbox stats` read it.
-- All times on the database clock: the relay sends ages (how long ago, on
-- its monotonic clock), never its wall clock.

-- OutboxRelayBeat records this relay's heartbeat: inserts its row on the
-- first beat, then updates it (heartbeat_at now, in flight, last claim and
-- last finalize as now() minus the ages the relay measured; a NULL age keeps
-- the time stored, never claimed or finalized yet). In the same statement
-- it deletes the rows of relays silent for longer than @forget_after.
-- Lock strategy: one row upsert by primary key (the relay's own row; no
-- other relay writes it), plus a DELETE of long-silent rows (no relay
-- writes those any more). 0 rows: never (returns the rows forgotten).
-- Index: outbox_relays_pkey.
-- name: OutboxRelayBeat :one
WITH forgotten AS (
    DELETE FROM outbox_relays
     WHERE heartbeat_at < now() - @forget_after::interval
       AND owner_prefix <> @owner_prefix::text
    RETURNING 1
), beat AS (
    INSERT INTO outbox_relays AS r (owner_prefix, owner, host, pid, version, started_at, heartbeat_at,
                                    in_flight, last_claim_at, last_finalize_at)
    VALUES (@owner_prefix::text, @owner::text, @host::text, @pid::integer, @version::text,
            now() - @running_for::interval, now(), @in_flight::integer,
            now() - sqlc.narg('last_claim_age')::interval, now() - sqlc.narg('last_finalize_age')::interval)
    ON CONFLICT (owner_prefix) DO UPDATE
       SET heartbeat_at     = now(),
           in_flight        = excluded.in_flight,
           last_claim_at    = coalesce(excluded.last_claim_at, r.last_claim_at),
           last_finalize_at = coalesce(excluded.last_finalize_at, r.last_finalize_at),
           stopped_at       = NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM forgotten) AS forgotten,
       (SELECT count(*) FROM beat) AS beats;

-- OutboxRelayStop marks this relay stopped (graceful shutdown): stopped_at
-- and the last heartbeat now, nothing in flight.
-- Lock strategy: one row update by primary key. 0 rows: the row was never
-- written or was forgotten (nothing to mark).
-- Index: outbox_relays_pkey.
-- name: OutboxRelayStop :execrows
UPDATE outbox_relays
   SET stopped_at   = now(),
       heartbeat_at = now(),
       in_flight    = 0,
       last_finalize_at = coalesce(now() - sqlc.narg('last_finalize_age')::interval, last_finalize_at)
 WHERE owner_prefix = @owner_prefix::text;

-- OutboxRelays lists the relays of the last hour: running first (by owner
-- prefix), then stopped or silent ones, most recent first, with the ages
-- (seconds, database clock) of their heartbeat, last claim and last
-- finalize (-1: never), and the leases their claims hold now (processing
-- rows whose lease_owner starts with the relay's prefix).
-- Lock strategy: none (reads). 0 rows: no relay has beaten in the last hour
-- (or none runs a version that records itself).
-- Index: outbox_relays_pkey (a row per relay); outbox_leased for the leases.
-- name: OutboxRelays :many
SELECT r.owner_prefix,
       r.owner,
       r.host,
       r.pid,
       r.version,
       r.started_at,
       r.heartbeat_at,
       r.in_flight,
       r.last_claim_at,
       r.last_finalize_at,
       r.stopped_at,
       extract(epoch FROM now() - r.heartbeat_at)::float8 AS heartbeat_age_seconds,
       coalesce(extract(epoch FROM now() - r.last_claim_at), -1)::float8 AS last_claim_age_seconds,
       coalesce(extract(epoch FROM now() - r.last_finalize_at), -1)::float8 AS last_finalize_age_seconds,
       (SELECT count(*)
          FROM outbox AS o
         WHERE o.status = 'processing'
           AND starts_with(o.lease_owner, r.owner_prefix)) AS leases
  FROM outbox_relays AS r
 ORDER BY r.stopped_at IS NOT NULL, r.stopped_at DESC NULLS FIRST, r.owner_prefix
 LIMIT @max_rows::integer;

-- OutboxRelaysTable reports whether outbox_relays exists (migration 00012
-- applied), so readers show no relays, instead of an error, on a table
-- migrated by an older pgoutbox.
-- Lock strategy: none (catalog read). 0 rows: never.
-- name: OutboxRelaysTable :one
SELECT (to_regclass('outbox_relays') IS NOT NULL)::boolean AS present;
