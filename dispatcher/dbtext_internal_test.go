package dispatcher

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pgoutbox/pgoutbox/internal/pgtest"
)

func TestDBText_ValidUTF8WithoutNULCutOnACharacterBoundary(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"plain", 100, "plain"},
		{"r\xe9ponse", 100, "r\uFFFDponse"},
		{"a\x00b", 100, "ab"},
		{"\xff\xfe\x00", 3, "\uFFFD"},
		{"ééééé", 3, "ééé"},
		{"aé\xe9é", 3, "aé\uFFFD"},
	} {
		got := dbText(c.in, c.max)
		if got != c.want || !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
			t.Errorf("dbText(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}

// The size checkJSONNumbers computes is never below what PostgreSQL renders
// (so a payload that renders past the limit is always refused) and close to
// it (so nothing reasonable is refused).
func TestCheckJSONNumbers_BoundsTheTextPostgreSQLRenders(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t, pgtest.NewURL(t))
	for _, doc := range []string{
		`1e5`, `-1.50e1`, `0.001`, `123.45e-1`, `5e-1`, `1E+2`, `0.000e-3`, `-0`, `-0.0`,
		`{"a":1,"b":[1,2,{"c":null}],"d":"x\u00e9\"y"}`, `[true,false,null, 1e300 ,  -7]`,
		`{"big":1e131071}`, `[1e-16383]`, `"\\/\/"`, `{}`, `[]`,
	} {
		var rendered int
		if err := pool.QueryRow(context.Background(), `SELECT octet_length($1::jsonb::text)`, doc).Scan(&rendered); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if err := checkJSONNumbers([]byte(doc), rendered-1); err == nil {
			t.Errorf("%.40s renders to %d bytes but passes a limit of %d", doc, rendered, rendered-1)
		}
		if err := checkJSONNumbers([]byte(doc), rendered+len(doc)); err != nil {
			t.Errorf("%.40s renders to %d bytes, refused with a limit of %d: %v", doc, rendered, rendered+len(doc), err)
		}
	}
}
