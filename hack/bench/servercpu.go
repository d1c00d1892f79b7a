package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// A store's server (Redis, PostgreSQL) runs in processes of its own, so the runtime's
// CPU time leaves out the work an execution makes it do. A serverMeter adds it: the
// utime+stime of the server's processes, from /proc like the runtime's, which works
// only when the server runs on this machine (else the column says n/a).
//
// A server may start and end processes during the window (PostgreSQL forks a backend
// per connection). The meter lists the server's processes at the window's start,
// every pollInterval and at its end, keyed by pid and start time (a reused pid is
// another process), and sums for each process the CPU time of its last sighting less
// that of its first sighting at the start (0 for one born in the window). A process
// that ends in the window loses the CPU time it used after its last sighting, at most
// one pollInterval of it.

// pollInterval is how often a serverMeter lists the server's processes in the window.
const pollInterval = 100 * time.Millisecond

// procKey identifies a process over time: its pid and its start time (field 22 of
// /proc/PID/stat, in clock ticks since boot).
type procKey struct {
	pid   int
	start int64
}

// procStat is what the meter reads of one process in /proc/PID/stat.
type procStat struct {
	ppid  int
	start int64
	cpu   time.Duration // utime + stime
}

// readProcStat reads /proc/PID/stat.
func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// As in cpuTime: fields are counted after the command name's closing parenthesis,
	// where field 3 (state) is f[0].
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	// ppid (field 4), utime and stime (14, 15), starttime (22).
	var n [4]int64
	for j, k := range []int{1, 11, 12, 19} {
		if n[j], err = strconv.ParseInt(f[k], 10, 64); err != nil {
			return procStat{}, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
	}
	return procStat{ppid: int(n[0]), start: n[3], cpu: time.Duration(n[1]+n[2]) * time.Second / time.Duration(clockTicks())}, nil
}

// procComm is the command name of process pid (/proc/PID/comm), "" if it has none.
func procComm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// serverMeter measures the CPU time of a server's processes over a window; list
// returns those processes now, with their CPU time so far.
type serverMeter struct {
	list        func() (map[procKey]time.Duration, error)
	first, last map[procKey]time.Duration
}

// start lists the processes at the window's start.
func (m *serverMeter) start() error {
	procs, err := m.list()
	m.first, m.last = procs, map[procKey]time.Duration{}
	return err
}

// poll lists the processes again, keeping each one's latest CPU time.
func (m *serverMeter) poll() error {
	procs, err := m.list()
	for k, cpu := range procs {
		m.last[k] = cpu
	}
	return err
}

// used is the CPU time the processes used between start and the last poll. A process
// listed at start and never again (it ended within one pollInterval) adds nothing.
func (m *serverMeter) used() time.Duration {
	var sum time.Duration
	for k, cpu := range m.last {
		sum += cpu - m.first[k]
	}
	return sum
}

// redisServerMeter meters the Redis server at url: the one redis-server process whose
// pid its INFO reports, or nil and the reason when that process is not on this
// machine. The figure includes the work of every other client of that server.
func redisServerMeter(ctx context.Context, url string) (*serverMeter, string, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, "", fmt.Errorf("-redis-url: %w", err)
	}
	opt.PoolSize = 1
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return nil, "", fmt.Errorf("redis at %s: INFO server: %w", opt.Addr, err)
	}
	m := regexp.MustCompile(`(?m)^process_id:(\d+)\r?$`).FindStringSubmatch(info)
	if m == nil {
		return nil, "its INFO names no process_id", nil
	}
	pid, _ := strconv.Atoi(m[1])
	if !strings.HasPrefix(procComm(pid), "redis") {
		return nil, fmt.Sprintf("its process %d is not a redis process on this machine", pid), nil
	}
	return &serverMeter{list: func() (map[procKey]time.Duration, error) {
		st, err := readProcStat(pid)
		if err != nil {
			return nil, fmt.Errorf("redis server process %d: %w", pid, err)
		}
		return map[procKey]time.Duration{{pid, st.start}: st.cpu}, nil
	}}, "", nil
}

// pgTitle parses the process title PostgreSQL gives a client backend, "postgres:
// [cluster_name: ]user database host(port) activity", into its database; ok is false
// for the server's other processes (checkpointer, walwriter, autovacuum, …).
func pgTitle(cmdline, cluster string) (database string, ok bool) {
	t, found := strings.CutPrefix(strings.TrimRight(strings.ReplaceAll(cmdline, "\x00", " "), " "), "postgres: ")
	if !found {
		return "", false
	}
	if cluster != "" {
		t = strings.TrimPrefix(t, cluster+": ")
	}
	f := strings.Fields(t)
	if len(f) < 3 || (f[2] != "[local]" && !clientHost.MatchString(f[2])) {
		return "", false
	}
	return f[1], true
}

// clientHost is the host(port) of a client backend's title.
var clientHost = regexp.MustCompile(`^\S*\(\d+\)$`)

// pgServerMeter meters the PostgreSQL server that admin is connected to: the
// postmaster (the parent of admin's backend) and its children, except the client
// backends of databases other than database, so that other work on a shared server
// stays out. The background processes (checkpointer, WAL writer, autovacuum, …) serve
// every database and are counted whole. It returns nil and the reason when the server
// is not on this machine.
func pgServerMeter(ctx context.Context, admin *pgx.Conn, database string) (*serverMeter, string, error) {
	var backend int
	var cluster string
	if err := admin.QueryRow(ctx, `SELECT pg_backend_pid(), current_setting('cluster_name')`).Scan(&backend, &cluster); err != nil {
		return nil, "", fmt.Errorf("postgres: find the server's pid: %w", err)
	}
	st, err := readProcStat(backend)
	if err != nil || procComm(backend) != "postgres" || procComm(st.ppid) != "postgres" {
		return nil, fmt.Sprintf("its backend %d is not a postgres process on this machine", backend), nil
	}
	postmaster := st.ppid
	return &serverMeter{list: func() (map[procKey]time.Duration, error) {
		return pgProcs(postmaster, cluster, database)
	}}, "", nil
}

// pgProcs lists the postmaster and the children pgServerMeter counts, with their CPU
// time so far.
func pgProcs(postmaster int, cluster, database string) (map[procKey]time.Duration, error) {
	pm, err := readProcStat(postmaster)
	if err != nil {
		return nil, fmt.Errorf("postgres postmaster %d: %w", postmaster, err)
	}
	procs := map[procKey]time.Duration{{postmaster, pm.start}: pm.cpu}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.ppid != postmaster {
			continue // not a child, or ended since the listing
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if db, client := pgTitle(string(cmdline), cluster); client && db != database {
			continue
		}
		procs[procKey{pid, st.start}] = st.cpu
	}
	return procs, nil
}
