package postgres_test

import (
	"context"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pgstore "github.com/switchboard-dev/switchboard/runtime/eventstore/postgres"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/storetest"
)

// TestHistories runs the history check with replicas that reach PostgreSQL through a
// proxy dropping connections at random: before a statement reaches the server, or
// after the server ran it (a COMMIT included) and before its reply arrives. Each
// replica is a Store on a pool of its own through the proxy, its listener too; the
// final reads go to the server directly.
func TestHistories(t *testing.T) {
	u, err := url.Parse(postgresURL())
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	schema := newSchema(t)
	check := open(t, schema, pgstore.WithRetention(time.Hour))
	proxy := startChaosProxy(t, target, 0.01)
	var replicas []storetest.LeaseStore
	for range 3 {
		s := openThrough(t, proxy.addr(), schema)
		replicas = append(replicas, storetest.LeaseStore{Log: s, Leases: s})
	}
	histories := 300
	if testing.Short() {
		histories = 50
	}
	storetest.CheckHistories(t, storetest.HistoryConfig{
		Histories: histories,
		Replicas:  replicas,
		Check:     check,
	})
	t.Logf("connections dropped by the proxy: %d", proxy.drops.Load())
}

// openThrough opens a Store on schema whose connections go through addr. Its start-up
// may meet a dropped connection too: it is tried again.
func openThrough(t *testing.T, addr, schema string) *pgstore.Store {
	t.Helper()
	for attempt := 1; ; attempt++ {
		s, err := pgstore.New(context.Background(), newPool(t, addr), pgstore.WithSchema(schema), pgstore.WithRetention(time.Hour))
		if err == nil {
			t.Cleanup(func() { s.Close() })
			return s
		}
		if attempt == 20 {
			t.Fatalf("New through the proxy: %v", err)
		}
	}
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
