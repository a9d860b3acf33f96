package dispatcher

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/pgoutbox/db"
)

// tracedDB gives every statement of the dispatcher's db.Queries a client
// span (claim, finalize, reschedule, lease, reap, monitoring): named
// "{query} {table}" after the sqlc query name that heads each generated
// statement ("-- name: OutboxClaimWindow :many"), with db.system.name
// "postgresql", db.operation.name the query name and db.collection.name the
// outbox table. A statement run for publishes in flight (a reschedule, a
// dead letter) is a child of the publish span; a batched finalize links to
// the publish spans it settles.
type tracedDB struct {
	inner db.DBTX
	t     *tracing
}

var _ db.DBTX = tracedDB{}

// queryName returns the sqlc name of a generated statement.
func queryName(sql string) string {
	const prefix = "-- name: "
	if !strings.HasPrefix(sql, prefix) {
		return "query"
	}
	rest := sql[len(prefix):]
	if i := strings.IndexAny(rest, " \n"); i >= 0 {
		return rest[:i]
	}
	return rest
}

type linkedJobsKey struct{}

// withLinkedJobs makes the statement run under ctx link to the publish
// spans of batch.
func withLinkedJobs(ctx context.Context, batch []*job) context.Context {
	return context.WithValue(ctx, linkedJobsKey{}, batch)
}

var clientStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// start starts the span of a statement. It also tells the dispatcher
// whether its tracer records at all (trace_quiet.go): every statement, the
// claim's included, checks again.
func (t tracedDB) start(ctx context.Context, sql string) (context.Context, trace.Span) {
	name := queryName(sql)
	sctx, span := t.t.tracer.Start(ctx, name, clientStart...)
	t.t.observeStatementSpan(ctx, span)
	ctx = sctx
	if !span.IsRecording() {
		return ctx, span // no SDK, or not sampled: nothing more to pay
	}
	span.SetName(name + " " + t.t.table)
	span.SetAttributes(
		attribute.String("db.system.name", "postgresql"),
		attribute.String("db.operation.name", name),
		attribute.String("db.collection.name", t.t.table),
	)
	// Links are added once the span is known to record: without an SDK a
	// batch of thousands would cost a slice per flush for nothing.
	if batch, ok := ctx.Value(linkedJobsKey{}).([]*job); ok {
		for _, j := range batch {
			if j.span != nil && j.span.IsRecording() {
				span.AddLink(trace.Link{SpanContext: j.span.SpanContext()})
			}
		}
	}
	return ctx, span
}

func endDBSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, pgx.ErrNoRows) && span.IsRecording() {
		errType := "error"
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr):
			errType = pgErr.Code
		case errors.Is(err, context.DeadlineExceeded):
			errType = "timeout"
		case errors.Is(err, context.Canceled):
			errType = "canceled"
		}
		span.SetAttributes(attribute.String("error.type", errType))
		if pgErr != nil {
			span.SetAttributes(attribute.String("db.response.status_code", pgErr.Code))
		}
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (t tracedDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, span := t.start(ctx, sql)
	tag, err := t.inner.Exec(ctx, sql, args...)
	if err == nil && span.IsRecording() {
		span.SetAttributes(attribute.Int64("db.response.affected_rows", tag.RowsAffected()))
	}
	endDBSpan(span, err)
	return tag, err
}

func (t tracedDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	ctx, span := t.start(ctx, sql)
	if !span.IsRecording() {
		// Ending a span that records nothing does nothing: no need to
		// wrap the rows (or to allocate for it).
		span.End()
		return t.inner.Query(ctx, sql, args...)
	}
	rows, err := t.inner.Query(ctx, sql, args...)
	if err != nil {
		endDBSpan(span, err)
		return rows, err
	}
	return &tracedRows{Rows: rows, span: span}, nil
}

func (t tracedDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	ctx, span := t.start(ctx, sql)
	if !span.IsRecording() {
		span.End()
		return t.inner.QueryRow(ctx, sql, args...)
	}
	return tracedRow{row: t.inner.QueryRow(ctx, sql, args...), span: span}
}

// tracedRows ends its span when the rows are closed, with the count read.
type tracedRows struct {
	pgx.Rows
	span  trace.Span
	n     int64
	ended bool
}

func (r *tracedRows) Next() bool {
	ok := r.Rows.Next()
	if ok {
		r.n++
	} else {
		r.end()
	}
	return ok
}

func (r *tracedRows) Close() {
	r.Rows.Close()
	r.end()
}

func (r *tracedRows) end() {
	if r.ended {
		return
	}
	r.ended = true
	if r.span.IsRecording() {
		r.span.SetAttributes(attribute.Int64("db.response.returned_rows", r.n))
	}
	endDBSpan(r.span, r.Rows.Err())
}

type tracedRow struct {
	row  pgx.Row
	span trace.Span
}

func (r tracedRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	endDBSpan(r.span, err)
	return err
}
