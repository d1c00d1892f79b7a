package memory

import (
	"container/heap"
	"time"
)

// expiry schedules the removal of key at time at.
type expiry struct {
	at  time.Time
	key string
}

// expiryQueue is a min-heap of expiries, so that a sweep costs in proportion to what it
// removes rather than to everything stored.
type expiryQueue []expiry

func (q expiryQueue) Len() int           { return len(q) }
func (q expiryQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q expiryQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *expiryQueue) Push(x any)        { *q = append(*q, x.(expiry)) }
func (q *expiryQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	old[len(old)-1] = expiry{} // drop the key string for the garbage collector
	*q = old[:len(old)-1]
	return x
}

// add schedules key for removal at at.
func (q *expiryQueue) add(at time.Time, key string) {
	heap.Push(q, expiry{at: at, key: key})
}

// due removes and returns the keys scheduled at or before now.
func (q *expiryQueue) due(now time.Time) []string {
	var keys []string
	for q.Len() > 0 && !(*q)[0].at.After(now) {
		keys = append(keys, heap.Pop(q).(expiry).key)
	}
	return keys
}
