package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestRelayGCPercent_FollowsTheLiveHeap(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, 1600},       // before the first collection: the runtime's 4 MiB minimum
		{1 << 20, 1600}, // below that minimum, the same
		{4 << 20, 1600}, // 4 MiB live: 64 MiB of headroom
		{32 << 20, 200},
		{64 << 20, 100}, // Go's default from here up
		{1 << 30, 100},  // never below it
	} {
		if got := relayGCPercent(tc.live, relayHeapHeadroom); got != tc.want {
			t.Errorf("relayGCPercent(%d MiB) = %d, want %d", tc.live>>20, got, tc.want)
		}
	}
}

// The relay raises GOGC while it runs, re-reads the live heap after each
// collection, and the last relay to stop gives back the GOGC it found; GOGC
// set in the environment is left alone.
func TestTuneRelayGC_SetsAndRestoresGOGC(t *testing.T) {
	before := debug.SetGCPercent(77)
	defer debug.SetGCPercent(before)

	if stop := tuneRelayGC(func(string) string { return "150" }); true {
		if got := debug.SetGCPercent(77); got != 77 {
			t.Fatalf("with GOGC set, GOGC was changed to %d", got)
		}
		stop()
	}

	none := func(string) string { return "" }
	stopA := tuneRelayGC(none)
	stopB := tuneRelayGC(none)
	runtime.GC()
	runtime.GC()
	time.Sleep(10 * time.Millisecond) // the sentinel's finalizer runs after the collection
	got := debug.SetGCPercent(-2)     // read (and keep: -2 is restored below)
	debug.SetGCPercent(got)
	// GOGC was 77; while relays run it is relayGCPercent of some live heap:
	// from Go's 100 up to the most the headroom allows.
	most := relayGCPercent(0, heapHeadroom(cgroupMemoryFiles))
	if got < 100 || got > most {
		t.Fatalf("GOGC while relays run = %d, want 100 to %d (live heap %d bytes)", got, most, liveHeap())
	}
	stopA()
	stopA() // idempotent
	// (A collection meanwhile may have set it from another live heap.)
	if g := debug.SetGCPercent(got); g < 100 || g > most {
		t.Fatalf("one of two relays stopped: GOGC = %d, want it still the relays' (100 to %d)", g, most)
	}
	stopB()
	if g := debug.SetGCPercent(77); g != 77 {
		t.Fatalf("after the last relay stopped GOGC = %d, want 77 back", g)
	}
}

// In a container the headroom is at most a quarter of the memory limit.
func TestHeapHeadroom_BoundedByTheCgroupLimit(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name  string
		files []string
		want  uint64
	}{
		{"no cgroup files", []string{missing}, relayHeapHeadroom},
		{"v2 without a limit", []string{file("v2max", "max\n")}, relayHeapHeadroom},
		{"v2, 64 MiB", []string{file("v2", "67108864\n")}, 16 << 20},
		{"v2, 1 GiB: the headroom itself", []string{file("v2big", "1073741824\n")}, relayHeapHeadroom},
		{"v1 unlimited", []string{missing, file("v1max", "9223372036854771712\n")}, relayHeapHeadroom},
		{"v1, 128 MiB", []string{missing, file("v1", "134217728")}, 32 << 20},
		{"garbage", []string{file("bad", "lots")}, relayHeapHeadroom},
	} {
		if got := heapHeadroom(tc.files); got != tc.want {
			t.Errorf("%s: heapHeadroom = %d MiB, want %d MiB", tc.name, got>>20, tc.want>>20)
		}
	}
	// 16 MiB of headroom over a 4 MiB live heap: GOGC 400.
	if got := relayGCPercent(4<<20, 16<<20); got != 400 {
		t.Errorf("relayGCPercent(4 MiB, 16 MiB) = %d, want 400", got)
	}
}
