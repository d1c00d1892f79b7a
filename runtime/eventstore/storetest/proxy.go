package storetest

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// ChaosProxy forwards TCP connections to target and drops each chunk of data it
// forwards, with its connection, with probability rate: the network of CheckHistories,
// where a call may fail before its backend ran it or after, before its answer arrived.
// A store's test points its histories' handles at Addr.
type ChaosProxy struct {
	ln     net.Listener
	target string
	rate   float64
	drops  atomic.Int64
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{} // open connections, closed by close
}

// StartChaosProxy starts a ChaosProxy to target; the test closes it when it ends.
func StartChaosProxy(t testing.TB, target string, rate float64) *ChaosProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ChaosProxy{ln: ln, target: target, rate: rate, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address, to dial instead of the target's.
func (p *ChaosProxy) Addr() string { return p.ln.Addr().String() }

// Drops is the number of connections the proxy has dropped so far.
func (p *ChaosProxy) Drops() int64 { return p.drops.Load() }

func (p *ChaosProxy) accept() {
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
func (p *ChaosProxy) pipe(src, dst net.Conn) {
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

func (p *ChaosProxy) drop(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *ChaosProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
