package cli

import (
	"testing"

	"github.com/pgoutbox/pgoutbox/migrations"
)

// migrate status reads a table migrated through another goose history by the
// objects each migration leaves: every migration must leave one.
func TestFootprints_EveryMigrationLeavesOne(t *testing.T) {
	names, fp, err := footprints(migrations.FS())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		t.Logf("%s: %v", n, fp[n])
		if len(fp[n]) == 0 {
			t.Errorf("%s creates no object of its own that later migrations keep (a table, index, sequence, function, trigger or column): `pgoutbox migrate status` could not tell whether a table migrated through another goose history has it; give it one, or teach footprints how to see it", n)
		}
	}
}
