package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The overhead run's native+budget side (spec/budgets.md): what one Budget adds to an
// execution, and the Redis round trip to compare it with.

// metricValue reads one sample of the runtime's /metrics, named with its labels as the
// exposition writes them (sorted by label name); ok is false when it is absent.
func metricValue(ctx context.Context, metricsAddr, sample string) (v float64, ok bool) {
	vals, ok := goMetrics(ctx, metricsAddr, sample)
	if !ok {
		return 0, false
	}
	return vals[0], true
}

// budgetSettled waits until the budget side's runtime has settled some cost since it
// read before: a runtime that served the level without holding and settling
// reservations (a Budget that did not match, a binary that ignores it) would measure
// nothing, so the run fails instead. Settlement follows the terminal event the client
// has already received, hence the short wait.
func budgetSettled(ctx context.Context, rt *runtimeProc, before float64) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, ok := metricValue(ctx, rt.metrics, budgetCostMetric)
		if ok && v > before {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return rt.failure("%s: %s did not grow over the level (still %g): the Budget held and settled nothing", sideBudget, budgetCostMetric, v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// budgetOpSeries are the sum and count series of the store's timing of the Budget's
// reservation (hold) and settlement (settle), in that order, as /metrics exposes them.
func budgetOpSeries(store string) []string {
	var names []string
	for _, op := range []string{"hold", "settle"} {
		for _, suffix := range []string{"_sum", "_count"} {
			names = append(names, `switchboard_eventstore_operation_duration_seconds`+suffix+`{op="`+op+`",store="`+store+`"}`)
		}
	}
	return names
}

// meanOps is the mean duration of hold and settle between two readings of
// budgetOpSeries; -1 for an operation that did not happen in between.
func meanOps(before, after []float64) [2]time.Duration {
	var mean [2]time.Duration
	for i := range mean {
		sum, n := after[2*i]-before[2*i], after[2*i+1]-before[2*i+1]
		mean[i] = -1
		if n > 0 {
			mean[i] = time.Duration(sum / n * float64(time.Second))
		}
	}
	return mean
}

// redisPinger measures the round trip from this process to the Redis the runtimes use,
// on one connection: the cost of one call to the store, the unit the Budget's admission
// cost is compared with.
type redisPinger struct{ rdb *redis.Client }

// newRedisPinger connects to url and checks that Redis answers, so that an unreachable
// Redis fails the run before any process starts.
func newRedisPinger(ctx context.Context, url string) (*redisPinger, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("-redis-url: %w", err)
	}
	opt.PoolSize = 1
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis at %s does not answer PING: %w", opt.Addr, err)
	}
	return &redisPinger{rdb: rdb}, nil
}

// p50 is the median of n sequential PINGs.
func (p *redisPinger) p50(ctx context.Context, n int) (time.Duration, error) {
	ds := make([]time.Duration, n)
	for i := range ds {
		start := time.Now()
		if err := p.rdb.Ping(ctx).Err(); err != nil {
			return 0, fmt.Errorf("redis PING: %w", err)
		}
		ds[i] = time.Since(start)
	}
	return percentile(sortedCopy(ds), .5), nil
}

func (p *redisPinger) close() { _ = p.rdb.Close() }

// us formats d in microseconds with 0.1 µs resolution.
func us(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) }

// signedUS formats d like us with an explicit sign.
func signedUS(d time.Duration) string {
	if d >= 0 {
		return "+" + us(d)
	}
	return us(d)
}
