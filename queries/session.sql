-- Session settings of pgoutbox's own connections (the relay's pool and
-- LISTEN connection, the CLI's and the console's connections).

-- OutboxSessionSettings makes the session what pgoutbox's statements need,
-- whatever the database or role sets (ALTER DATABASE / ALTER ROLE ... SET):
-- READ COMMITTED transactions (the claims' FOR UPDATE SKIP LOCKED would fail
-- with serialization errors in REPEATABLE READ or SERIALIZABLE, and the
-- functions that read after taking the aggregates' locks refuse to run),
-- and no server-side statement, lock, idle-in-transaction or transaction
-- timeout: every statement is bounded by the caller's own timeout
-- (ClaimTimeout, WriteTimeout), and the relay tells a claim that waited for
-- a lock from one that failed. A setting that already has the value needed
-- is left alone, so on a database with the defaults nothing is set.
-- Session-level (set_config(..., false)): run once per connection.
-- Lock strategy: none. Always one row.
-- Index: none (no table read).
-- name: OutboxSessionSettings :exec
SELECT CASE WHEN current_setting('default_transaction_isolation') <> 'read committed'
            THEN set_config('default_transaction_isolation', 'read committed', false) END,
       CASE WHEN current_setting('statement_timeout') <> '0'
            THEN set_config('statement_timeout', '0', false) END,
       CASE WHEN current_setting('lock_timeout') <> '0'
            THEN set_config('lock_timeout', '0', false) END,
       CASE WHEN current_setting('idle_in_transaction_session_timeout') <> '0'
            THEN set_config('idle_in_transaction_session_timeout', '0', false) END,
       CASE WHEN coalesce(current_setting('transaction_timeout', true), '0') <> '0'
            THEN set_config('transaction_timeout', '0', false) END;
