package cli

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
)

// The relay's garbage collector.
//
// A relay's live heap is small (a few MiB: the messages in flight and the
// pool), and with Go's default GOGC of 100 the collector runs again each
// time the program has allocated as much as is live: every 20 ms or so in a
// drain, where it took a third of the relay's CPU, on the two cores the
// database needed too. Unless GOGC is set in the
// environment, run lets the heap grow by at least relayHeapHeadroom between
// collections: GOGC follows the live heap, measured after every collection,
// as headroom / live (at least 100, Go's default, which holds from a live
// heap of relayHeapHeadroom up). The heap then peaks near
// max(2 × live, live + relayHeapHeadroom). GOMEMLIMIT, when set, still
// bounds it. In a container with a memory limit (cgroup v2 memory.max, or
// v1 memory.limit_in_bytes) the headroom is at most a quarter of the limit,
// so a relay given 64 MiB keeps a heap that fits it.
const relayHeapHeadroom = 64 << 20

// cgroupMemoryFiles hold the process's memory limit, cgroup v2 first.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// heapHeadroom is relayHeapHeadroom, or a quarter of the memory limit read
// from the first of files that holds one, whichever is smaller.
func heapHeadroom(files []string) uint64 {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return relayHeapHeadroom
		}
		limit, err := strconv.ParseUint(s, 10, 64)
		if err != nil || limit >= 1<<60 { // cgroup v1 says "unlimited" with a huge number
			return relayHeapHeadroom
		}
		return min(relayHeapHeadroom, limit/4)
	}
	return relayHeapHeadroom
}

// gcHeapMinimum is the runtime's smallest live heap in its pacing: the
// collector never aims below gcHeapMinimum × GOGC/100, so a live heap below
// it counts as gcHeapMinimum (before the first collection the live heap is
// 0: GOGC 6,400 would let the heap reach 256 MiB before the first one).
const gcHeapMinimum = 4 << 20

var relayGC struct {
	mu       sync.Mutex
	users    int    // relays running in this process
	previous int    // GOGC before the first of them
	armed    bool   // a sentinel is waiting for the next collection
	headroom uint64 // heapHeadroom, read when the first relay starts
}

// tuneRelayGC starts following the live heap (unless GOGC is set) and returns
// the function that stops it; the last relay of the process to stop restores
// the GOGC it found.
func tuneRelayGC(getenv func(string) string) (stop func()) {
	if getenv("GOGC") != "" {
		return func() {}
	}
	relayGC.mu.Lock()
	relayGC.users++
	if relayGC.users == 1 {
		relayGC.headroom = heapHeadroom(cgroupMemoryFiles)
		relayGC.previous = debug.SetGCPercent(relayGCPercent(liveHeap(), relayGC.headroom))
		if !relayGC.armed {
			relayGC.armed = true
			armGCSentinel()
		}
	}
	relayGC.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			relayGC.mu.Lock()
			defer relayGC.mu.Unlock()
			relayGC.users--
			if relayGC.users == 0 {
				debug.SetGCPercent(relayGC.previous)
			}
		})
	}
}

// relayGCPercent is the GOGC that lets a heap of live bytes grow by
// headroom before the next collection.
func relayGCPercent(live, headroom uint64) int {
	return int(max(headroom*100/max(live, gcHeapMinimum), 100))
}

// gcSentinel is garbage from birth: its finalizer runs after the collection
// that found it, once per cycle, and sets GOGC from the live heap that
// collection measured, then arms the next sentinel.
type gcSentinel struct{ _ *int }

func armGCSentinel() {
	runtime.SetFinalizer(&gcSentinel{}, func(*gcSentinel) {
		relayGC.mu.Lock()
		defer relayGC.mu.Unlock()
		if relayGC.users == 0 {
			relayGC.armed = false // stopped: no new sentinel
			return
		}
		debug.SetGCPercent(relayGCPercent(liveHeap(), relayGC.headroom))
		armGCSentinel()
	})
}

// liveHeap is the heap the last collection found live (0 before the first).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
