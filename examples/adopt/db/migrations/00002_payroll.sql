-- +goose Up
CREATE TABLE hr.payslips (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    employee_id  bigint  NOT NULL REFERENCES hr.employees (id),
    period       text    NOT NULL,
    amount_cents bigint  NOT NULL,
    paid_at      timestamptz
);

-- +goose Down
DROP TABLE hr.payslips;
