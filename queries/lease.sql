-- OutboxExtendLease is the fenced heartbeat of a long publish:
-- lease_until = now() + @lease, only while the caller still owns the lease.
-- Lock strategy: single-row UPDATE by primary key.
-- 0 rows: lease lost (taken over or reaped); the caller must stop publishing
-- (cancel its context) and must not finalize.
-- name: OutboxExtendLease :execrows
UPDATE outbox
   SET lease_until = now() + @lease::interval
 WHERE id = @id::bigint
   AND status = 'processing'
   AND lease_version = @lease_version::bigint;
