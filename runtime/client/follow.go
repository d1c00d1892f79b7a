package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/url"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Backoff bounds how Follow reconnects. The n-th consecutive failed connection waits a
// random duration between half and all of min(Initial·2ⁿ⁻¹, Max) (or the server's
// Retry-After hint, if longer); any event received resets n. After Retries consecutive
// failures Follow gives up and returns the last error.
type Backoff struct {
	// Initial is the base delay of the first reconnection.
	Initial time.Duration
	// Max caps the base delay.
	Max time.Duration
	// Retries is the number of consecutive failures tolerated; 0 never reconnects.
	Retries int
}

// DefaultBackoff reconnects quickly after a cut stream and gives up after about half a
// minute of consecutive failures.
var DefaultBackoff = Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Retries: 10}

// delay returns the wait before reconnection attempt n (from 1). The jitter keeps many
// clients cut by the same event (a proxy restart) from reconnecting in lockstep.
func (b Backoff) delay(n int, hint time.Duration) time.Duration {
	d := b.Initial
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if d > 0 {
		d = d/2 + rand.N(d/2+1)
	}
	return max(d, hint)
}

// Follow calls fn with every event of execution id whose sequence is greater than
// after, in sequence order and exactly once each, until the terminal event; then it
// returns nil. It also returns nil at once when the execution is terminal and nothing is
// newer than after. When the stream is cut (a *TruncatedError), or the server answers
// with a retryable error, or the connection fails, Follow reconnects from the last
// sequence it delivered, waiting as the client's Backoff says. It returns fn's error if
// fn fails, the context's error when ctx ends, and any other error (such as not_found)
// as it is.
func (c *Client) Follow(ctx context.Context, id string, after uint64, fn func(protocol.Event) error) error {
	cursor := after
	failures := 0
	for {
		err := c.followOnce(ctx, id, &cursor, &failures, fn)
		if err == nil {
			return nil
		}
		var fnErr *callbackError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		retry, hint := retryable(ctx, err)
		if !retry || failures >= c.backoff.Retries {
			return err
		}
		failures++
		t := time.NewTimer(c.backoff.delay(failures, hint))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// callbackError marks an error returned by Follow's fn, which is never retried.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

// followOnce reads one connection's worth of events, advancing *cursor and resetting
// *failures with every event delivered.
func (c *Client) followOnce(ctx context.Context, id string, cursor *uint64, failures *int, fn func(protocol.Event) error) error {
	st, err := c.Events(ctx, id, *cursor)
	if err != nil {
		return err
	}
	defer st.Close()
	for st.Next() {
		if err := fn(st.Event()); err != nil {
			return &callbackError{err}
		}
		*cursor = st.LastSequence()
		*failures = 0
	}
	return st.Err()
}

// retryable reports whether Follow should reconnect after err, and the server's delay
// hint.
func retryable(ctx context.Context, err error) (bool, time.Duration) {
	if ctx.Err() != nil {
		return false, 0
	}
	var trunc *TruncatedError
	if errors.As(err, &trunc) {
		return true, 0
	}
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr.Retryable(), apiErr.RetryAfter
	}
	// Failures to connect or to read the response head (a restarting runtime, a dropped
	// connection) come from the transport as *url.Error; protocol violations (a gap, an
	// undecodable event) are other errors and are not retried.
	var urlErr *url.Error
	return errors.As(err, &urlErr), 0
}

// FollowResult follows execution id from its first event to its terminal event and
// returns the snapshot folded with protocol's Apply, which equals the server's GET
// /result for the same events. On error it returns the snapshot folded so far with the
// error.
func (c *Client) FollowResult(ctx context.Context, id string) (*protocol.Snapshot, error) {
	s := protocol.NewSnapshot(id)
	err := c.Follow(ctx, id, 0, s.Apply)
	return &s, err
}
