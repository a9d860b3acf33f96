-- pgoutbox-migration: 00011_outbox_attempts.sql
-- +goose Up
-- outbox_attempts: the attempt history of each message, for the operator
-- who is asked "what happened to order 42": every publish that failed (its
-- time, the relay's claim, the error and what the receiver answered) and
-- every redelivery of a delivered message an operator asked for (who, when).
--
-- Written by the relay's batch writer (OutboxFinalizeMany) in the same
-- statement as the failure's outcome: nothing on the success path (a batch
-- that only succeeded is written by OutboxMarkDoneMany, which never touches
-- this table), one row version per failed publish on the failure path.
--
-- Bounded without a DELETE, and written without reading: an entry is keyed
-- by its claim. n is the claim's lease_version (the message's claims
-- numbered 1, 2, ... over its whole life: never reset, so a redrive, which
-- resets outbox.attempts, loses no count), and a failure goes to slot
-- n % 20 with INSERT ... ON CONFLICT DO UPDATE, overwriting the failure of
-- claim n - 20 (or older): a message keeps the failures of its last 20
-- claims. Operator actions take slots 20 to 24, a ring of their own (the
-- free one, else the oldest). The message's lease_version is how many
-- claims it ever had.
--
-- No foreign key to the outbox: a key check would lock the outbox row on
-- every write and a cascade would probe this table once for every purged
-- done row; purge deletes the history of the messages it deletes itself
-- (OutboxPurge), and a history whose message is gone is never read.
--
-- kind: 'retry' (a failure of the message, tried again later), 'dead'
-- (the failure sent it to dead), 'defer' (the receiver asked to try
-- later; no attempt spent), 'unavailable' (the destination was down;
-- attempt refunded), 'redeliver' (an operator sent the delivered message
-- out again; actor holds who).
-- n: the claim (its lease_version); for an operator action, the message's
-- lease_version when it acted (its last claim).
-- attempt: outbox.attempts when the entry was written (the attempt's
-- number since the message was created or last redriven).
-- actor: the relay's claim (its lease_owner: owner name, run id, claim
-- number), or the operator (the console user or the database role).
-- answer: what the receiver answered, when the publisher knows it (the
-- webhook: the HTTP status and the start of the body).
CREATE TABLE outbox_attempts (
    message_id bigint     NOT NULL,
    slot      integer     NOT NULL,
    n         integer     NOT NULL,
    at        timestamptz NOT NULL DEFAULT now(),
    kind      text        NOT NULL,
    attempt   integer     NOT NULL,
    actor     text,
    error     text,
    answer    text,
    PRIMARY KEY (message_id, slot)
);

-- +goose Down
DROP TABLE outbox_attempts;
