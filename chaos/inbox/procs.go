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

// procs supervises a group of processes (the relays, or the consumers, of
// one broker): each is restarted whenever it exits, until stop.
type procs struct {
	kind    string // relay, consumer
	broker  string
	bin     string
	args    func(name string, gen int) []string
	logDir  string
	stopped atomic.Bool
	wg      sync.WaitGroup
	slots   []*proc
	kills   atomic.Int64
	pauses  atomic.Int64
	crashes atomic.Int64 // exits the suite did not cause
}

type proc struct {
	name    string
	mu      sync.Mutex
	cmd     *exec.Cmd
	running bool
	byUs    bool
}

func newProcs(kind, broker string, n int, bin, logDir string, args func(name string, gen int) []string) *procs {
	p := &procs{kind: kind, broker: broker, bin: bin, args: args, logDir: logDir}
	for i := 1; i <= n; i++ {
		p.slots = append(p.slots, &proc{name: fmt.Sprintf("%s-%s-%d", broker, kind, i)})
	}
	return p
}

func (p *procs) start() {
	for _, s := range p.slots {
		p.wg.Add(1)
		go p.supervise(s)
	}
}

func (p *procs) supervise(s *proc) {
	defer p.wg.Done()
	log, err := os.Create(filepath.Join(p.logDir, s.name+".log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos-inbox:", err)
		return
	}
	defer log.Close()
	for gen := 1; !p.stopped.Load(); gen++ {
		cmd := exec.Command(p.bin, p.args(s.name, gen)...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches the suite only
		s.mu.Lock()
		if err := cmd.Start(); err != nil {
			s.mu.Unlock()
			fmt.Fprintf(log, "chaos-inbox: start: %v\n", err)
			time.Sleep(time.Second)
			continue
		}
		s.cmd, s.running, s.byUs = cmd, true, false
		s.mu.Unlock()
		_ = cmd.Wait()
		s.mu.Lock()
		s.running = false
		if !s.byUs && !p.stopped.Load() {
			p.crashes.Add(1)
			fmt.Fprintf(log, "chaos-inbox: %s exited by itself: %v\n", s.name, cmd.ProcessState)
		}
		s.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
}

// kill SIGKILLs slot i; its supervisor restarts it.
func (p *procs) kill(i int) {
	s := p.slots[i%len(p.slots)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running || p.stopped.Load() {
		return
	}
	s.byUs = true
	_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGKILL)
	p.kills.Add(1)
}

// stop asks every process to stop (SIGTERM), and kills those still running
// after timeout.
func (p *procs) stop(timeout time.Duration) {
	p.stopped.Store(true)
	for _, s := range p.slots {
		s.mu.Lock()
		if s.running {
			_ = s.cmd.Process.Signal(syscall.SIGCONT)
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
		}
		s.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		for _, s := range p.slots {
			s.mu.Lock()
			if s.running {
				_ = s.cmd.Process.Kill()
			}
			s.mu.Unlock()
		}
		<-done
	}
}

// pause freezes slot i for d (SIGSTOP, then SIGCONT), like a long GC pause
// or a stalled VM: a relay's leases expire and another relay takes its
// messages over; a consumer's unacknowledged messages are delivered to the
// other consumer. It blocks for d.
func (p *procs) pause(i int, d time.Duration) {
	s := p.slots[i%len(p.slots)]
	s.mu.Lock()
	if !s.running || p.stopped.Load() {
		s.mu.Unlock()
		return
	}
	proc := s.cmd.Process
	_ = proc.Signal(syscall.SIGSTOP)
	p.pauses.Add(1)
	s.mu.Unlock()
	time.Sleep(d)
	_ = proc.Signal(syscall.SIGCONT)
}
