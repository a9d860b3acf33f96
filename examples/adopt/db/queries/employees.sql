-- name: EmployeeCreate :one
INSERT INTO hr.employees (name, email) VALUES (@name::text, sqlc.narg('email')::text)
RETURNING *;

-- name: EmployeeGet :one
SELECT * FROM hr.employees WHERE id = @id::bigint;

-- name: PayslipCreate :one
INSERT INTO hr.payslips (employee_id, period, amount_cents)
VALUES (@employee_id::bigint, @period::text, @amount_cents::bigint)
RETURNING id;
