package queries_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/pgoutbox/db"
	"github.com/pgoutbox/pgoutbox/db/opsdb"
	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

type bundle struct {
	pool *pgxpool.Pool
	q    *db.Queries
	ops  *opsdb.Queries
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.NewPool(t)
	return &bundle{pool: pool, q: db.New(pool), ops: opsdb.New(pool)}
}

// seed inserts n unordered events for aggregate agg and returns their ids.
func (b *bundle) seed(t *testing.T, n int, agg string) []int64 {
	return b.seedEvents(t, n, agg, false)
}

func (b *bundle) seedOrdered(t *testing.T, n int, agg string) []int64 {
	return b.seedEvents(t, n, agg, true)
}

func (b *bundle) seedEvents(t *testing.T, n int, agg string, ordered bool) []int64 {
	t.Helper()
	ids := make([]int64, 0, n)
	for i := 0; i < n; i++ {
		id, err := b.q.OutboxEnqueue(context.Background(), db.OutboxEnqueueParams{
			AggregateType: "order",
			AggregateID:   agg,
			EventType:     "OrderEvent",
			Payload:       fmt.Appendf(nil, `{"n":%d}`, i),
			Headers:       []byte(`{}`),
			Ordered:       ordered,
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

type claimed struct {
	ID           int64
	LeaseVersion int64
	Attempts     int32
	AggregateID  string
	Owner        string // the lease_owner the claim wrote: with LeaseVersion, the fencing token
}

// waitLeasesExpired waits until every lease in the table has run out on the
// database clock (the test's workers "died" holding them).
func (b *bundle) waitLeasesExpired(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var live int
		if err := b.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM outbox WHERE status = 'processing' AND lease_until >= now()`).Scan(&live); err != nil {
			t.Fatal(err)
		}
		if live == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d leases still live after 30s", live)
		}
		time.Sleep(5 * time.Millisecond) // polling the condition
	}
}

func (b *bundle) claim(t *testing.T, owner string, batch int, lease time.Duration, maxAttempts int) []claimed {
	t.Helper()
	rows, err := claimWith(context.Background(), b.q, owner, batch, lease, maxAttempts)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// claimWith runs the seed's claim() as the relay's lanes do: reap, then an
// expired lease first and alone (OutboxClaimExpired, unordered rows), else
// pending rows (claimPendingWith); sorted by id.
func claimWith(ctx context.Context, q *db.Queries, owner string, batch int, lease time.Duration, maxAttempts int) ([]claimed, error) {
	if _, err := q.OutboxReap(ctx, db.OutboxReapParams{MaxAttempts: int32(maxAttempts)}); err != nil {
		return nil, err
	}
	expired, err := q.OutboxClaimExpired(ctx, db.OutboxClaimExpiredParams{
		Owner: owner, Lease: lease, MaxAttempts: int32(maxAttempts), Unordered: true})
	if err != nil {
		return nil, err
	}
	if len(expired) > 0 {
		row, err := q.OutboxIsolateRead(ctx, db.OutboxIsolateReadParams{ID: expired[0].ID, LeaseVersion: expired[0].LeaseVersion, LeaseOwner: owner})
		if err != nil {
			return nil, err
		}
		return []claimed{{expired[0].ID, expired[0].LeaseVersion, expired[0].Attempts, row.AggregateID, owner}}, nil
	}
	rows, err := claimPendingWith(ctx, q, owner, batch, lease)
	if err != nil {
		return nil, err
	}
	out := make([]claimed, 0, len(rows))
	for _, r := range rows {
		out = append(out, claimed{r.ID, r.LeaseVersion, r.Attempts, r.AggregateID, owner})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// claimPendingWith is the relay's claim of unordered pending rows,
// OutboxClaimWindow, from a cursor that has handed out nothing yet: the
// window from the empty snapshot to now. Rows come back in claim order.
func claimPendingWith(ctx context.Context, q *db.Queries, owner string, batch int, lease time.Duration) ([]*db.OutboxClaimWindowRow, error) {
	snap, err := q.OutboxClaimSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	return q.OutboxClaimWindow(ctx, db.OutboxClaimWindowParams{
		Snapshot: "1:1:", Upper: snap.Snapshot, Batch: int32(batch), Owner: owner, Lease: lease})
}

func (b *bundle) claimOrdered(t *testing.T, owner string, batch int) []claimed {
	t.Helper()
	rows, err := claimOrderedWith(context.Background(), b.q, owner, batch)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// decide moves the seq every ordered event drew at COMMIT into the event
// and decides its head (OutboxDecideCommitted), as the relay does before each
// ordered claim.
func (b *bundle) decide(t *testing.T) {
	t.Helper()
	if _, err := decideFromStart(context.Background(), b.q, 100000); err != nil {
		t.Fatal(err)
	}
}

// decideFromStart runs OutboxDecideCommitted from no floor: it decides up
// to n ordered events committed and not decided yet, lowest seq first.
func decideFromStart(ctx context.Context, q *db.Queries, n int32) (int32, error) {
	r, err := q.OutboxDecideCommitted(ctx, db.OutboxDecideCommittedParams{MaxRows: n, SeenHolders: []string{}})
	if err != nil {
		return 0, err
	}
	return r.Decided, nil
}

// claimOrderedWith claims ordered heads as the dispatcher's lanes do: an
// expired lease first and alone (OutboxClaimExpired, ordered rows), else
// every claimable head up to batch from a cursor that has handed out
// nothing yet (OutboxClaimOrderedWindow over the window from the empty
// snapshot to now), after deciding the ordered events committed
// (OutboxDecideCommitted), as the relay does before each ordered claim.
func claimOrderedWith(ctx context.Context, q *db.Queries, owner string, batch int) ([]claimed, error) {
	if _, err := decideFromStart(ctx, q, 1000); err != nil {
		return nil, err
	}
	expired, err := q.OutboxClaimExpired(ctx, db.OutboxClaimExpiredParams{
		Owner: owner, Lease: time.Minute, MaxAttempts: 12, Ordered: true})
	if err != nil {
		return nil, err
	}
	if len(expired) > 0 {
		r := claimed{ID: expired[0].ID, LeaseVersion: expired[0].LeaseVersion, Attempts: expired[0].Attempts, Owner: owner}
		row, err := q.OutboxIsolateRead(ctx, db.OutboxIsolateReadParams{ID: r.ID, LeaseVersion: r.LeaseVersion, LeaseOwner: owner})
		if err != nil {
			return nil, err
		}
		r.AggregateID = row.AggregateID
		return []claimed{r}, nil
	}
	snap, err := q.OutboxClaimSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := q.OutboxClaimOrderedWindow(ctx, db.OutboxClaimOrderedWindowParams{
		Snapshot: "1:1:", Upper: snap.Snapshot, Batch: int32(batch), Owner: owner, Lease: time.Minute})
	if err != nil {
		return nil, err
	}
	out := make([]claimed, 0, len(rows))
	for _, r := range rows {
		out = append(out, claimed{r.ID, r.LeaseVersion, r.Attempts, r.AggregateID, owner})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (b *bundle) markDone(t *testing.T, c claimed) bool {
	t.Helper()
	n, err := markDoneOne(context.Background(), b.q, c)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// markDoneOne finalizes one claimed message done through the relay's writer,
// OutboxMarkDoneMany (fenced per row): 1 when written, 0 when its lease was
// lost.
func markDoneOne(ctx context.Context, q *db.Queries, c claimed) (int64, error) {
	ids, err := q.OutboxMarkDoneMany(ctx, db.OutboxMarkDoneManyParams{
		Ids: []int64{c.ID}, LeaseVersions: []int64{c.LeaseVersion}, LeaseOwners: []string{c.Owner}})
	return int64(len(ids)), err
}

// finalizeOne writes one outcome ('retry', 'defer', 'dead', 'release' or
// 'done') for one claimed message through the relay's fenced writer,
// OutboxFinalizeMany, with its delay and error, and returns the status the
// row got ('pending', 'dead' or 'done'), or "" when the write matched
// nothing: the lease was lost. A defer goes dead past maxDeferAge.
func finalizeOne(ctx context.Context, q *db.Queries, c claimed, outcome string, delay time.Duration, errText string, maxDeferAge time.Duration) (string, error) {
	got, err := q.OutboxFinalizeMany(ctx, db.OutboxFinalizeManyParams{
		Ids: []int64{c.ID}, LeaseVersions: []int64{c.LeaseVersion}, LeaseOwners: []string{c.Owner},
		Outcomes: []string{outcome}, DelaysUs: []int64{delay.Microseconds()}, Errors: []string{errText},
		MaxDeferAge: maxDeferAge})
	if err != nil || len(got.Ids) == 0 {
		return "", err
	}
	return got.Statuses[0], nil
}

// wrote is 1 for a status finalizeOne returned, 0 for "" (lease lost).
func wrote(status string, err error) (int64, error) {
	if status == "" {
		return 0, err
	}
	return 1, err
}

type row struct {
	Status       string
	Attempts     int32
	LeaseVersion int64
	LastError    *string
	Available    bool // available_at <= now()
	LeaseOwner   *string
}

func (b *bundle) row(t *testing.T, id int64) row {
	t.Helper()
	var r row
	err := b.pool.QueryRow(context.Background(),
		`SELECT status, attempts, lease_version, last_error, available_at <= now(), lease_owner FROM outbox WHERE id = $1`, id).
		Scan(&r.Status, &r.Attempts, &r.LeaseVersion, &r.LastError, &r.Available, &r.LeaseOwner)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (b *bundle) countStatus(t *testing.T, status string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE status = $1`, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The seed's publisher classification, as test doubles for dispatchOnce.
type (
	retryableErr struct{ msg string }
	permanentErr struct{ msg string }
	deferErr     struct {
		delay  time.Duration
		reason string
	}
)

func (e retryableErr) Error() string { return e.msg }
func (e permanentErr) Error() string { return e.msg }
func (e deferErr) Error() string     { return e.reason }

type publishFunc func(ctx context.Context, id int64, aggregateID string, payload []byte) error

// dispatchOnce is the seed's section 4.1 loop over the generated queries:
// claim (short tx, committed), publish outside any transaction, fenced
// finalize by the outcome. It returns the number of messages claimed and the
// number of fenced writes that found their lease lost.
func dispatchOnce(ctx context.Context, q *db.Queries, publish publishFunc, owner string, batch int, lease time.Duration, maxAttempts int) (int, int, error) {
	msgs, err := claimWith(ctx, q, owner, batch, lease, maxAttempts)
	if err != nil {
		return 0, 0, err
	}
	lost := 0
	for _, m := range msgs {
		var n int64
		perr := publish(ctx, m.ID, m.AggregateID, nil)
		var (
			d deferErr
			r retryableErr
			p permanentErr
		)
		switch {
		case perr == nil:
			n, err = markDoneOne(ctx, q, m)
		case errors.As(perr, &d):
			n, err = wrote(finalizeOne(ctx, q, m, "defer", d.delay, d.reason, 7*24*time.Hour))
		case errors.As(perr, &r):
			if int(m.Attempts) >= maxAttempts {
				n, err = wrote(finalizeOne(ctx, q, m, "dead", 0, "retries exhausted: "+r.Error(), 0))
			} else {
				n, err = wrote(finalizeOne(ctx, q, m, "retry", fullJitter(int(m.Attempts), time.Millisecond, 10*time.Millisecond), r.Error(), 0))
			}
		case errors.As(perr, &p):
			n, err = wrote(finalizeOne(ctx, q, m, "dead", 0, p.Error(), 0))
		default:
			return len(msgs), lost, perr // the seed does not catch unclassified errors
		}
		if err != nil {
			return len(msgs), lost, err
		}
		if n == 0 {
			lost++
		}
	}
	return len(msgs), lost, nil
}

func fullJitter(attempt int, base, cap time.Duration) time.Duration {
	d := base << attempt
	if d > cap || d <= 0 {
		d = cap
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// recorder counts publishes per id, safe for concurrent use.
type recorder struct {
	mu    sync.Mutex
	count map[int64]int
	order []int64
}

func newRecorder() *recorder { return &recorder{count: map[int64]int{}} }

func (r *recorder) publish(_ context.Context, id int64, _ string, _ []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count[id]++
	r.order = append(r.order, id)
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
