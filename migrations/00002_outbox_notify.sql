-- pgoutbox-migration: 00002_outbox_notify.sql
-- +goose Up
-- Wake-up signal for idle dispatchers. A statement-level trigger sends one
-- NOTIFY per inserting statement; PostgreSQL delivers notifications only at
-- COMMIT (never before the rows are visible, never for a rolled-back
-- transaction) and folds identical notifications of one transaction into one,
-- so a burst of inserts in a transaction wakes dispatchers once. Dispatchers
-- treat it as a hint only and keep polling as the fallback.
-- +goose StatementBegin
CREATE FUNCTION outbox_notify() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_NAME, '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_notify
    AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- +goose Down
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify();
