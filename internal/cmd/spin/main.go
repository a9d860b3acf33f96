// Command spin keeps CPU cores busy until it is stopped: one goroutine per
// core (or -n), each spinning on arithmetic. `make stress` runs it beside
// the test suite when stress-ng is not installed, so that the suite is
// proven on a busy machine.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

func main() {
	n := flag.Int("n", runtime.NumCPU(), "goroutines to spin (each keeps one core busy)")
	flag.Parse()
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "spin: -n must be at least 1")
		os.Exit(2)
	}
	for i := 0; i < *n; i++ {
		go func() {
			x := uint64(i) + 1
			for {
				// xorshift: cheap, never optimized away (x escapes below).
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				if x == 0 {
					fmt.Println(x)
				}
			}
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
}
