package memory

import (
	"container/heap"
	"time"
)

// leaseItem is a leased, non-terminal execution in the orphan index.
type leaseItem struct {
	id      string
	expires time.Time
	pos     int // position in the heap, kept up to date by Swap
}

// leaseIndex is the orphan index (spec/events.md, "Ownership and orphans"): every
// leased, non-terminal execution, in a min-heap by lease expiry. Each execution holds
// its item, so that renewing, acquiring, releasing and ending a lease fix the heap in
// O(log n) without searching it.
type leaseIndex []*leaseItem

func (q leaseIndex) Len() int           { return len(q) }
func (q leaseIndex) Less(i, j int) bool { return q[i].expires.Before(q[j].expires) }
func (q leaseIndex) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].pos, q[j].pos = i, j
}
func (q *leaseIndex) Push(x any) {
	it := x.(*leaseItem)
	it.pos = len(*q)
	*q = append(*q, it)
}
func (q *leaseIndex) Pop() any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	it.pos = -1
	return it
}

// set files id under expires and returns its item: it (moved) if not nil, else a new
// one.
func (q *leaseIndex) set(it *leaseItem, id string, expires time.Time) *leaseItem {
	if it == nil {
		it = &leaseItem{id: id, expires: expires}
		heap.Push(q, it)
		return it
	}
	it.expires = expires
	heap.Fix(q, it.pos)
	return it
}

// remove takes it out of the index; nil is a no-op.
func (q *leaseIndex) remove(it *leaseItem) {
	if it != nil {
		heap.Remove(q, it.pos)
	}
}

// expired returns the ids of at most limit executions whose lease expired at or before
// now, earliest first, without changing the index. A heap node expires no earlier than
// its parent, so only the children of expired nodes can be next: a small heap of those
// candidates yields them in order at O(log limit) each, whatever the index's size.
func (q leaseIndex) expired(now time.Time, limit int) []string {
	if len(q) == 0 || q[0].expires.After(now) {
		return nil // the earliest lease is unexpired, and so are the others
	}
	var ids []string
	// Each expired node adds at most two candidates.
	next := candidates{index: q, positions: make([]int, 1, min(2*limit+1, len(q)))}
	for len(ids) < limit && next.Len() > 0 {
		i := heap.Pop(&next).(int)
		if q[i].expires.After(now) {
			break // the earliest candidate is unexpired, so are the rest
		}
		ids = append(ids, q[i].id)
		for child := 2*i + 1; child <= 2*i+2 && child < len(q); child++ {
			heap.Push(&next, child)
		}
	}
	return ids
}

// candidates is a min-heap of positions in index, by their expiry.
type candidates struct {
	index     leaseIndex
	positions []int
}

func (c candidates) Len() int { return len(c.positions) }
func (c candidates) Less(i, j int) bool {
	return c.index[c.positions[i]].expires.Before(c.index[c.positions[j]].expires)
}
func (c candidates) Swap(i, j int) { c.positions[i], c.positions[j] = c.positions[j], c.positions[i] }
func (c *candidates) Push(x any)   { c.positions = append(c.positions, x.(int)) }
func (c *candidates) Pop() any {
	x := c.positions[len(c.positions)-1]
	c.positions = c.positions[:len(c.positions)-1]
	return x
}
