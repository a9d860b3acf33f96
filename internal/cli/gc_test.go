package cli

import (
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
		if got := relayGCPercent(tc.live); got != tc.want {
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
	// The test binary's live heap is a few MiB: GOGC well above Go's 100
	// (another package's collection may have moved it since, within range).
	if live := liveHeap(); got < 100 || got > relayGCPercent(0) || (live < 16<<20 && got < 400) {
		t.Fatalf("GOGC while relays run = %d, want relayGCPercent of the live heap (%d bytes: %d)", got, live, relayGCPercent(live))
	}
	stopA()
	stopA() // idempotent
	if g := debug.SetGCPercent(got); g != got {
		t.Fatalf("one of two relays stopped: GOGC = %d, want it unchanged (%d)", g, got)
	}
	stopB()
	if g := debug.SetGCPercent(77); g != 77 {
		t.Fatalf("after the last relay stopped GOGC = %d, want 77 back", g)
	}
}
