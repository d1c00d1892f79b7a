package redis_test

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisstore "github.com/switchboard-dev/switchboard/runtime/eventstore/redis"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/storetest"
)

// TestHistories runs the history check with replicas that reach Redis through a proxy
// dropping connections at random: before a command reaches Redis, or after Redis ran
// it and before its reply arrives. The replicas' clients retry a failed command 0, 1 or
// 3 times (go-redis MaxRetries), so both repeated scripts and failed calls happen.
func TestHistories(t *testing.T) {
	o, err := goredis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := startChaosProxy(t, o.Addr, 0.01)
	prefix := newPrefix(t)
	var replicas []storetest.LeaseStore
	for _, retries := range []int{-1, 1, 3} {
		ro := *o
		ro.Addr = proxy.addr()
		ro.MaxRetries = retries
		ro.MinRetryBackoff, ro.MaxRetryBackoff = time.Millisecond, 5*time.Millisecond
		client := goredis.NewClient(&ro)
		t.Cleanup(func() { client.Close() })
		s, err := redisstore.NewFromClient(client, redisstore.WithKeyPrefix(prefix), redisstore.WithRetention(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		replicas = append(replicas, storetest.LeaseStore{Log: s, Leases: s})
	}
	histories := 300
	if testing.Short() {
		histories = 50
	}
	storetest.CheckHistories(t, storetest.HistoryConfig{
		Histories: histories,
		Replicas:  replicas,
		Check:     open(t, prefix, redisstore.WithRetention(time.Hour)),
	})
	t.Logf("connections dropped by the proxy: %d", proxy.drops.Load())
}

// chaosProxy forwards TCP connections to target and drops each chunk of data it
// forwards, with its connection, with probability rate.
type chaosProxy struct {
	ln     net.Listener
	target string
	rate   float64
	drops  atomic.Int64
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{} // open connections, closed by close
}

func startChaosProxy(t *testing.T, target string, rate float64) *chaosProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &chaosProxy{ln: ln, target: target, rate: rate, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *chaosProxy) addr() string { return p.ln.Addr().String() }

func (p *chaosProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(client, server) })
		p.wg.Go(func() { p.pipe(server, client) })
	}
}

// pipe copies src to dst until either fails or a chunk is dropped, then closes both.
func (p *chaosProxy) pipe(src, dst net.Conn) {
	defer p.drop(src, dst)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if rand.Float64() < p.rate {
				p.drops.Add(1)
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *chaosProxy) drop(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *chaosProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
