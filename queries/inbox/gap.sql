-- Gaps (table inbox_gaps): positions of an aggregate that were not processed
-- before a later event was, and why.

-- InboxGapRecord records a gap: the events of the aggregate after
-- @after_seq (NULL: from its start) and before @before_seq, predecessor
-- @missing_seq among them, will not be processed before @before_seq.
-- Lock strategy: INSERT ... ON CONFLICT DO NOTHING on (source, aggregate_id,
-- before_seq), under the aggregate's lock.
-- name: InboxGapRecord :exec
INSERT INTO inbox_gaps (source, aggregate_id, before_seq, after_seq, missing_seq, reason)
VALUES (@source::text, @aggregate_id::text, @before_seq::bigint, sqlc.narg('after_seq')::bigint,
        @missing_seq::bigint, @reason::text)
ON CONFLICT (source, aggregate_id, before_seq) DO NOTHING;

-- InboxGapCovers reports whether a recorded gap of the aggregate covers
-- position @seq: an event arriving after its gap was declared.
-- Index: the primary key (source, aggregate_id, before_seq).
-- Lock strategy: none (a read; no row locks). Always one row (false: no gap covers @seq).
-- name: InboxGapCovers :one
SELECT EXISTS (
    SELECT 1
      FROM inbox_gaps
     WHERE source = @source::text
       AND aggregate_id = @aggregate_id::text
       AND before_seq > @seq::bigint
       AND coalesce(after_seq, 0) < @seq::bigint
)::boolean AS covered;

-- InboxGaps lists the gaps recorded for one source, by aggregate and
-- position (for pgoutbox verify and operators).
-- Index: the primary key.
-- Lock strategy: none (a read; no row locks).
-- No rows: no gap recorded for the source.
-- name: InboxGaps :many
SELECT aggregate_id, before_seq, after_seq, missing_seq, reason, detected_at
  FROM inbox_gaps
 WHERE source = @source::text
 ORDER BY aggregate_id, before_seq;
