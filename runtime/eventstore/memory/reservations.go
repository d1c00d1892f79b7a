package memory

import (
	"container/heap"
	"time"
)

// resItem is a stored reservation in the reservation queue.
type resItem struct {
	key     string
	expires time.Time
	pos     int // position in the heap, kept up to date by Swap
}

// resQueue is the reservations of one scope, in a min-heap by expiry: its length is
// their count, which Reserve's limit bounds, and its first item tells when the next one
// expires. Each reservation holds its item, so that Release takes it out in O(log n)
// without searching: a released key costs nothing from then on, not its place in the
// queue until its ttl would have ended (a refused submission reserves and releases one;
// spec/http-api.md, "Idempotency").
type resQueue []*resItem

func (q resQueue) Len() int           { return len(q) }
func (q resQueue) Less(i, j int) bool { return q[i].expires.Before(q[j].expires) }
func (q resQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].pos, q[j].pos = i, j
}
func (q *resQueue) Push(x any) {
	it := x.(*resItem)
	it.pos = len(*q)
	*q = append(*q, it)
}
func (q *resQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = nil // drop the item for the garbage collector
	*q = old[:len(old)-1]
	it.pos = -1
	return it
}

// add files key under expires and returns its item.
func (q *resQueue) add(key string, expires time.Time) *resItem {
	it := &resItem{key: key, expires: expires}
	heap.Push(q, it)
	return it
}

// remove takes it out of the queue.
func (q *resQueue) remove(it *resItem) {
	heap.Remove(q, it.pos)
}

// due removes and returns the keys that expired at or before now.
func (q *resQueue) due(now time.Time) []string {
	var keys []string
	for q.Len() > 0 && !(*q)[0].expires.After(now) {
		keys = append(keys, heap.Pop(q).(*resItem).key)
	}
	return keys
}
