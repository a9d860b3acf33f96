-- +goose Up
CREATE INDEX payslips_employee ON hr.payslips (employee_id, period);

-- +goose Down
DROP INDEX hr.payslips_employee;
