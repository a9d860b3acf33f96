package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// fleet supervises the relay processes: one slot per relay, restarted
// whenever its process exits (killed by the suite, or failing its startup
// checks while PostgreSQL is down), until stop.
type fleet struct {
	bin     string
	args    func(slot, owner string) []string
	env     []string
	logDir  string
	slots   []*slot
	stopped atomic.Bool
	wg      sync.WaitGroup

	mu     sync.Mutex
	faults []Fault
}

type slot struct {
	name string
	log  *os.File

	mu         sync.Mutex
	cmd        *exec.Cmd
	gen        int
	running    bool
	paused     bool
	killedByUs bool
	restartIn  time.Duration
	exits      []exitInfo
}

type exitInfo struct {
	Owner  string
	Code   int    // -1 when killed by a signal
	Signal string // signal name when killed
	ByUs   bool   // the suite killed it (kill fault or poison)
	At     time.Time
	Final  bool // the exit after the suite's SIGTERM at the end
}

func newFleet(n int, bin, logDir string, env []string, args func(slot, owner string) []string) (*fleet, error) {
	f := &fleet{bin: bin, args: args, env: env, logDir: logDir}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("relay-%d", i)
		lf, err := os.Create(filepath.Join(logDir, name+".log"))
		if err != nil {
			return nil, err
		}
		f.slots = append(f.slots, &slot{name: name, log: lf})
	}
	return f, nil
}

func (f *fleet) start() {
	for _, s := range f.slots {
		f.wg.Add(1)
		go f.supervise(s)
	}
}

func (f *fleet) supervise(s *slot) {
	defer f.wg.Done()
	for !f.stopped.Load() {
		s.mu.Lock()
		s.gen++
		owner := fmt.Sprintf("%s.%d", s.name, s.gen)
		cmd := exec.Command(f.bin, f.args(s.name, owner)...)
		cmd.Env = f.env
		cmd.Stdout = s.log
		cmd.Stderr = s.log
		// Own process group: a Ctrl-C in the terminal reaches the suite,
		// which shuts the relays down itself.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err := cmd.Start()
		if err != nil {
			s.mu.Unlock()
			fmt.Fprintf(os.Stderr, "chaos: start %s: %v\n", owner, err)
			time.Sleep(time.Second)
			continue
		}
		s.cmd, s.running, s.paused, s.killedByUs, s.restartIn = cmd, true, false, false, 200*time.Millisecond
		s.mu.Unlock()

		_ = cmd.Wait()

		s.mu.Lock()
		s.running = false
		e := exitInfo{Owner: owner, Code: cmd.ProcessState.ExitCode(), ByUs: s.killedByUs, At: time.Now(), Final: f.stopped.Load()}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal().String()
		}
		s.exits = append(s.exits, e)
		delay := s.restartIn
		s.mu.Unlock()
		if f.stopped.Load() {
			return
		}
		time.Sleep(delay)
	}
}

func (f *fleet) slot(name string) *slot {
	for _, s := range f.slots {
		if s.name == name {
			return s
		}
	}
	return nil
}

func (f *fleet) record(ft Fault) {
	f.mu.Lock()
	f.faults = append(f.faults, ft)
	f.mu.Unlock()
}

// kill SIGKILLs the slot's process; the supervisor restarts it after
// restartIn (200ms when 0).
func (f *fleet) kill(name, kind string, restartIn time.Duration) bool {
	s := f.slot(name)
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running || f.stopped.Load() {
		return false
	}
	s.killedByUs = true
	if restartIn > 0 {
		s.restartIn = restartIn
	}
	now := time.Now()
	_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGKILL)
	f.record(Fault{Kind: kind, Relay: name, Start: now, End: now})
	return true
}

// pause freezes the slot's process for d (SIGSTOP, then SIGCONT), like a
// long GC pause or a VM stall; it blocks for d.
func (f *fleet) pause(name string, d time.Duration) bool {
	s := f.slot(name)
	s.mu.Lock()
	if !s.running || s.paused || f.stopped.Load() {
		s.mu.Unlock()
		return false
	}
	p := s.cmd.Process
	s.paused = true
	start := time.Now()
	_ = p.Signal(syscall.SIGSTOP)
	s.mu.Unlock()
	time.Sleep(d)
	s.mu.Lock()
	_ = p.Signal(syscall.SIGCONT)
	s.paused = false
	s.mu.Unlock()
	f.record(Fault{Kind: "pause", Relay: name, Start: start, End: time.Now()})
	return true
}

func (f *fleet) up() int {
	n := 0
	for _, s := range f.slots {
		s.mu.Lock()
		if s.running {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// stop sends SIGTERM to every relay (graceful shutdown) and waits; after
// timeout the stragglers are killed.
func (f *fleet) stop(timeout time.Duration) {
	f.stopped.Store(true)
	for _, s := range f.slots {
		s.mu.Lock()
		if s.running {
			_ = s.cmd.Process.Signal(syscall.SIGCONT)
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
		}
		s.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		for _, s := range f.slots {
			s.mu.Lock()
			if s.running {
				_ = s.cmd.Process.Kill()
			}
			s.mu.Unlock()
		}
		<-done
	}
	for _, s := range f.slots {
		_ = s.log.Close()
	}
}

func (f *fleet) allFaults() []Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Fault(nil), f.faults...)
}

func (f *fleet) allExits() []exitInfo {
	var out []exitInfo
	for _, s := range f.slots {
		s.mu.Lock()
		out = append(out, s.exits...)
		s.mu.Unlock()
	}
	return out
}
