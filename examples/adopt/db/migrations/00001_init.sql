-- +goose Up
CREATE SCHEMA IF NOT EXISTS hr;
CREATE TABLE hr.employees (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL,
    email      text,
    hired_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE hr.employees;
