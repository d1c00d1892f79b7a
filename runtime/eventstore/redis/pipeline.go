package redis

import (
	"context"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// appendPipeline sends the appends of concurrent executions to Redis together: group
// commit across executions. An execution never has two appends in flight (the engine
// records one event before producing the next), so batching can only be across
// executions; under load dozens of them append at once, and sending each on its own
// round trip costs a write and a read system call, a netpoll wake-up and Redis's own
// per-command I/O, for every event (spec/redis.md, "Appends").
//
// A worker takes the first waiting append, then every append already queued (up to
// maxAppendBatch), and sends them as one pipeline; each caller gets its own script's
// answer, exactly as if it had been sent alone. With no other append waiting, a batch
// is that one append: the only cost at low load is a hand-off to the worker. Appends
// of one execution stay in order, since its caller waits for each before the next.
//
// go-redis does this by hand only (Pipeline); there is no automatic pipelining in the
// client, hence this small queue.
type appendPipeline struct {
	client goredis.UniversalClient
	queue  chan *appendCall
	closed <-chan struct{}
}

const (
	// maxAppendBatch bounds a pipeline: large enough to carry every append of a busy
	// replica's round trip, small enough that one batch's reply is quickly read.
	maxAppendBatch = 64
	// appendWorkers pipelines may be in flight at once, so a new batch does not wait
	// for the previous one's reply.
	appendWorkers = 2
)

// appendCall is one append waiting for, or carried by, a pipeline.
type appendCall struct {
	ctx  context.Context
	keys []string
	args []any
	code int64
	err  error
	done chan struct{} // receives once the answer is set
}

var appendCalls = sync.Pool{New: func() any { return &appendCall{done: make(chan struct{}, 1)} }}

func newAppendPipeline(client goredis.UniversalClient, closed <-chan struct{}) *appendPipeline {
	p := &appendPipeline{client: client, queue: make(chan *appendCall, 4*maxAppendBatch), closed: closed}
	for range appendWorkers {
		go p.work()
	}
	return p
}

// run runs appendScript with keys and args in the next pipeline and returns its answer.
// A caller whose context has ended before its pipeline is sent gets the context's error
// and nothing is sent, as go-redis does for a single command. Once the store is closed
// it returns goredis.ErrClosed, which Store.fail reports as eventstore.ErrClosed.
func (p *appendPipeline) run(ctx context.Context, keys []string, args []any) (int64, error) {
	c := appendCalls.Get().(*appendCall)
	c.ctx, c.keys, c.args = ctx, keys, args
	select {
	case p.queue <- c:
	case <-p.closed:
		*c = appendCall{done: c.done}
		appendCalls.Put(c)
		return 0, goredis.ErrClosed
	}
	select {
	case <-c.done:
	case <-p.closed:
		// The worker may still answer; c is left to it and not reused.
		return 0, goredis.ErrClosed
	}
	code, err := c.code, c.err
	*c = appendCall{done: c.done}
	appendCalls.Put(c)
	return code, err
}

// work sends batches until the store is closed.
func (p *appendPipeline) work() {
	batch := make([]*appendCall, 0, maxAppendBatch)
	cmds := make([]*goredis.Cmd, 0, maxAppendBatch)
	for {
		batch = batch[:0]
		select {
		case c := <-p.queue:
			batch = append(batch, c)
		case <-p.closed:
			return
		}
	fill:
		for len(batch) < maxAppendBatch {
			select {
			case c := <-p.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		cmds = p.send(batch, cmds[:0])
		clear(cmds)
	}
}

// send runs batch as one pipeline and answers every call. The pipeline's own error
// (a connection failure) is also set on each command, so each call gets it; a script
// missing from Redis's cache (a restart or SCRIPT FLUSH) is loaded and run again by
// Script.Run for the calls that hit it.
func (p *appendPipeline) send(batch []*appendCall, cmds []*goredis.Cmd) []*goredis.Cmd {
	pipe := p.client.Pipeline()
	for _, c := range batch {
		if c.ctx.Err() != nil {
			cmds = append(cmds, nil)
			continue
		}
		cmds = append(cmds, appendScript.EvalSha(c.ctx, pipe, c.keys, c.args...))
	}
	if pipe.Len() > 0 {
		// The calls' contexts ended or not, every command sent is answered: as for a
		// single command, an append Redis received is not abandoned half-way.
		_, _ = pipe.Exec(context.WithoutCancel(batch[0].ctx))
	}
	for i, c := range batch {
		if cmd := cmds[i]; cmd == nil {
			c.err = c.ctx.Err()
		} else {
			c.code, c.err = cmd.Int64()
			if c.err != nil && goredis.HasErrorPrefix(c.err, "NOSCRIPT") {
				c.code, c.err = appendScript.Run(context.WithoutCancel(c.ctx), p.client, c.keys, c.args...).Int64()
			}
		}
		c.done <- struct{}{}
	}
	return cmds
}
