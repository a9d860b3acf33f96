-- OutboxExtendLease is the fenced heartbeat of a long publish:
-- lease_until = now() + @lease, only while the caller still owns the lease
-- (the claim's token: lease_owner and lease_version, see finalize.sql).
-- Lock strategy: single-row UPDATE by primary key.
-- 0 rows: lease lost (taken over, reaped, or the claim lost in a failover);
-- the caller must stop publishing (cancel its context) and must not finalize.
-- name: OutboxExtendLease :execrows
UPDATE outbox
   SET lease_until = now() + @lease::interval
 WHERE id = @id::bigint
   AND status = 'processing'
   AND lease_version = @lease_version::bigint
   AND lease_owner = @lease_owner::text;
