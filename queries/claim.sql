-- Claims. Each runs as one autocommit statement (a short transaction): it
-- writes ownership into the row (status, lease_owner, lease_until, and
-- lease_version + 1, the fencing token) and COMMITs before anything is
-- published. FOR UPDATE SKIP LOCKED only keeps two claims from taking the same
-- row at the same moment; after COMMIT the columns carry the ownership.
-- Attempts count here, at claim time, so a message that crashes every worker
-- still reaches max attempts (see OutboxReap).
--
-- The relay's claims are in window.sql (pending rows from a cursor:
-- OutboxClaimWindow, OutboxClaimOrderedWindow) and isolate.sql (an expired
-- lease, claimed alone: OutboxClaimExpired); this file holds the reap that
-- runs with them.

-- OutboxReap buries messages whose worker keeps dying: processing rows whose
-- lease expired with every attempt spent go to dead. A poison message never
-- reaches a finalize, so this is the only way it stops being claimed.
-- Run it with every claim (the dispatcher does).
-- Grace: a row is reaped only @grace after its lease expired. An expired
-- lease does not mean the owner crashed: it may have delivered the message
-- and be only late to finalize (database briefly unreachable, a slow
-- commit). Reaped at once, such a message would be buried although it was
-- delivered: `dead retry` would deliver it twice, and in an ordered
-- aggregate it would block every later event behind a delivered one. Within
-- the grace the owner's fenced OutboxMarkDoneMany still succeeds (nobody else can
-- claim the row: attempts >= max). A message that crashes every worker is
-- still buried, only @grace later.
-- @expired_after: the recovery lane's cursor, as in OutboxClaimExpired
-- (isolate.sql); rows whose lease expired @grace before it were reaped by an
-- earlier pass. The zero time reads from the start.
-- Lock strategy: plain UPDATE; rows locked by a concurrent claim are waited
-- for, and the claim cannot take them (attempts >= max).
-- Index: outbox_leased, from @expired_after - @grace.
-- Rows affected: messages sent to dead now; 0 is the normal case.
-- name: OutboxReap :execrows
UPDATE outbox
   SET status      = 'dead',
       last_error  = 'lease expired after max attempts (worker crash?)',
       lease_owner = NULL,
       lease_until = NULL
 WHERE status = 'processing'
   AND lease_until < now() - @grace::interval
   AND lease_until >= (@expired_after::timestamptz) - (@grace::interval)
   AND attempts >= @max_attempts::integer;
