package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

// Process figures come from Linux's /proc: CPU time from /proc/PID/stat (utime + stime,
// in clock ticks), resident memory from VmRSS in /proc/PID/status.

// clockTicks is the kernel's USER_HZ, the unit of utime and stime (getconf CLK_TCK;
// 100 on every common Linux).
var clockTicks = sync.OnceValue(func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 100
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n <= 0 {
		return 100
	}
	return n
})

// cpuTime is the CPU time (user + system) process pid has used so far.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is parenthesized and may hold spaces: fields are
	// counted after its closing parenthesis, where field 3 (state) is the first.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / time.Duration(clockTicks()), nil
}

// rss is the resident set size of process pid, in bytes.
func rss(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmRSS of %d: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// cpuMeter measures a process's CPU time over an interval.
type cpuMeter struct {
	pid   int
	start time.Duration
}

func startCPU(pid int) (*cpuMeter, error) {
	t, err := cpuTime(pid)
	return &cpuMeter{pid: pid, start: t}, err
}

// perOp is the CPU time used since the meter started, divided by ops.
func (m *cpuMeter) perOp(ops int) (time.Duration, error) {
	t, err := cpuTime(m.pid)
	if err != nil {
		return 0, err
	}
	if ops == 0 {
		return 0, errors.New("no operations to divide CPU time by")
	}
	return (t - m.start) / time.Duration(ops), nil
}

// raiseFileLimit raises the soft limit on open files to the hard limit and checks that
// it admits need descriptors. Processes started afterwards inherit it.
func raiseFileLimit(need uint64) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("get open-file limit: %w", err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return fmt.Errorf("raise open-file limit: %w", err)
		}
	}
	if rl.Cur < need {
		return fmt.Errorf("open-file limit %d is below the %d this run needs (ulimit -Hn)", rl.Cur, need)
	}
	return nil
}

// percentile returns the p-th percentile (0 < p ≤ 1, nearest rank) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// sortedCopy returns ds sorted, leaving ds as it was.
func sortedCopy(ds []time.Duration) []time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s
}

// ms formats d in milliseconds with microsecond resolution.
func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }

// signedMS formats d like ms with an explicit sign.
func signedMS(d time.Duration) string {
	if d >= 0 {
		return "+" + ms(d)
	}
	return ms(d)
}

// ratio formats a/b as "N.NNx".
func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "n/a"
	}
	return strconv.FormatFloat(float64(a)/float64(b), 'f', 2, 64) + "x"
}

// mib formats a byte count in MiB.
func mib(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) }

// table writes tab-separated rows as aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }
