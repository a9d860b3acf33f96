package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A command refused for a missing privilege says which role lacks what, and
// the grant that fixes it; the library's own prefixes ("outbox: enqueue:")
// never double the command's.
func TestErrors_PermissionDeniedNamesTheRoleAndTheGrant(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	role := "cli_ro_" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	d.exec(t, fmt.Sprintf("CREATE ROLE %s LOGIN", role))
	t.Cleanup(func() {
		_, _ = d.pool.Exec(context.Background(), fmt.Sprintf("DROP OWNED BY %s; DROP ROLE IF EXISTS %s", role, role))
	})
	u, err := url.Parse(d.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	env := map[string]string{"DATABASE_URL": u.String()}

	r := call(t, invocation{env: env}, "stats")
	wantCode(t, r, ExitFailure)
	mustContain(t, r, "stderr", "pgoutbox: checking the schema: ERROR: permission denied for table pgoutbox_migrations (SQLSTATE 42501); the role \""+role+"\" needs SELECT on pgoutbox_migrations")
	mustContain(t, r, "stderr", "GRANT SELECT ON pgoutbox_migrations TO \""+role+"\"")

	d.exec(t, fmt.Sprintf("GRANT SELECT ON pgoutbox_migrations TO %s", role))
	d.exec(t, fmt.Sprintf("GRANT SELECT ON outbox TO %s", role))
	id := d.enqueue(t, 1, "E", "a", false)[0]
	d.kill(t, id)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "--aggregate-type", "a", "--aggregate-id", "1", "--event-type", "E", "--payload", "{}"},
			`pgoutbox: enqueue: ERROR: permission denied for table outbox (SQLSTATE 42501); the role "` + role + `" needs INSERT on outbox for this: grant it the pgoutbox_producer role of docs/roles.sql (GRANT pgoutbox_producer TO "` + role + `"), or GRANT INSERT ON outbox TO "` + role + `"`},
		{[]string{"dead", "retry", strconv.FormatInt(id, 10)},
			`needs SELECT, UPDATE on outbox for this: grant it the pgoutbox_admin role of docs/roles.sql`},
		{[]string{"purge", "--older-than", "1s"},
			`needs SELECT, DELETE on outbox for this: grant it the pgoutbox_admin role of docs/roles.sql`},
	} {
		r := call(t, invocation{env: env}, tc.args...)
		wantCode(t, r, ExitFailure)
		mustContain(t, r, "stderr", tc.want)
		if strings.Contains(r.stderr, ": outbox: ") || strings.Count(r.stderr, "SQLSTATE") != 1 {
			t.Errorf("%v: the error repeats a prefix or itself:\n%s", tc.args, r.stderr)
		}
	}
	var status string
	if err := d.pool.QueryRow(ctx, "SELECT status FROM outbox WHERE id = $1", id).Scan(&status); err != nil || status != "dead" {
		t.Errorf("message %d is %s (%v) after the refused commands, want dead", id, status, err)
	}
}

// stats names the table it reports on.
func TestStats_HeaderNamesTheTable(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	r := call(t, invocation{env: d.env()}, "migrate", "up", "--table", "shop_outbox")
	wantCode(t, r, ExitOK)
	r = call(t, invocation{env: d.env()}, "stats", "--table", "shop_outbox")
	wantCode(t, r, ExitOK)
	if first, _, _ := strings.Cut(r.stdout, "\n"); !strings.HasPrefix(first, "shop_outbox at ") {
		t.Errorf("stats --table shop_outbox header = %q, want shop_outbox at ...", first)
	}
	r = call(t, invocation{env: d.env()}, "stats", "--json", "--table", "shop_outbox")
	wantCode(t, r, ExitOK)
	mustContain(t, r, "stdout", `"table":"shop_outbox"`)
}
