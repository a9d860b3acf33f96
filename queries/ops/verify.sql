-- What pgoutbox verify compares with what a consumer received.

-- OutboxVerifyRows lists the outbox's rows keyset-paged by id (pass the
-- last id of the previous page as @after_id, 0 for the first): each row's
-- aggregate, its position in commit order (seq; 0 for a row without one),
-- its status, and whether it was skipped (resolved without delivery: a
-- dead message an operator skipped).
-- Index: the primary key. Not for the hot path: it reads every row.
-- 0 rows: nothing more.
-- Lock strategy: none (a read; no row locks).
-- name: OutboxVerifyRows :many
SELECT id, aggregate_id, ordered, coalesce(seq, 0)::bigint AS seq, status,
       (status = 'skipped')::boolean AS skipped
  FROM outbox
 WHERE id > @after_id::bigint
 ORDER BY id
 LIMIT sqlc.arg('limit')::integer;
