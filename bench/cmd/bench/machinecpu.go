package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"
)

// machineCPU is the machine's CPU time from the first line of /proc/stat:
// busy (user, nice, system, irq, softirq, steal) and idle (idle, iowait),
// both summed over all CPUs. A development diagnostic: whether a drain
// keeps the cores busy or waits on round trips.
type machineCPU struct{ busy, idle time.Duration }

func readMachineCPU() machineCPU {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	if !s.Scan() {
		return machineCPU{}
	}
	fields := strings.Fields(s.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return machineCPU{}
	}
	var v [8]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(fields[i+1], 10, 64)
	}
	tick := time.Second / clockTicks
	return machineCPU{
		busy: time.Duration(v[0]+v[1]+v[2]+v[5]+v[6]+v[7]) * tick,
		idle: time.Duration(v[3]+v[4]) * tick,
	}
}

// share is the busy share of the machine between c and later, 0 to 1.
func (c machineCPU) share(later machineCPU) float64 {
	busy, idle := later.busy-c.busy, later.idle-c.idle
	if busy+idle <= 0 {
		return 0
	}
	return float64(busy) / float64(busy+idle)
}
