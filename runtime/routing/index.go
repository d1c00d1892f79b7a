package routing

import (
	"cmp"
	"hash/maphash"
	"iter"
	"maps"
	"slices"
)

// This file holds the persistent indexes a Table is made of. A published Table is shared
// by every in-flight execution that loaded it, so it is never modified; the Registry
// derives the next table from the previous one instead of rebuilding it, and the two
// share everything the change did not touch. That keeps one change at a large table
// cheap: it copies one shard of each map and the ability lists that hold the deployment,
// not every entry.

// shardBits sets the number of shards of a pmap: 256 keeps a shard at ~40 entries at
// 10,000 deployments, so a change clones ~40 map entries and a 2 KiB shard array, and
// still only ~4,000 entries at a million.
const (
	shardBits  = 8
	shardCount = 1 << shardBits
	_          = uint16(shardCount - 1) // buildPmap keeps shard numbers in uint16s
)

// shardSeed makes shard placement unpredictable from outside, so that names chosen by
// tenants cannot pile up in one shard.
var shardSeed = maphash.MakeSeed()

// shardKey is a map key that knows its shard.
type shardKey interface {
	comparable
	shard() uint
}

func (r Ref) shard() uint {
	h := maphash.String(shardSeed, r.Namespace) ^ maphash.String(shardSeed, r.Name)*0x9e3779b97f4a7c15
	return uint(h >> (64 - shardBits))
}

// ability is an ability name as a pmap key.
type ability string

func (a ability) shard() uint { return uint(maphash.String(shardSeed, string(a)) >> (64 - shardBits)) }

// pmap is a persistent map: with and without return a new map that shares every shard
// but the key's with the receiver, which is left as it was. The zero value is empty.
type pmap[K shardKey, V any] struct {
	shards *[shardCount]map[K]V // nil when empty; never modified once the pmap exists
	n      int
}

func (m pmap[K, V]) get(k K) (V, bool) {
	if m.shards == nil {
		var zero V
		return zero, false
	}
	v, ok := m.shards[k.shard()][k]
	return v, ok
}

func (m pmap[K, V]) len() int { return m.n }

func (m pmap[K, V]) all() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if m.shards == nil {
			return
		}
		for _, s := range m.shards {
			for k, v := range s {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// with returns m with k mapped to v.
func (m pmap[K, V]) with(k K, v V) pmap[K, V] {
	shards, i := m.copyShards(k)
	s := make(map[K]V, len(shards[i])+1)
	maps.Copy(s, shards[i])
	if _, had := s[k]; !had {
		m.n++
	}
	s[k] = v
	shards[i] = s
	return pmap[K, V]{shards: shards, n: m.n}
}

// without returns m without k.
func (m pmap[K, V]) without(k K) pmap[K, V] {
	if _, ok := m.get(k); !ok {
		return m
	}
	shards, i := m.copyShards(k)
	if len(shards[i]) == 1 {
		shards[i] = nil
	} else {
		s := maps.Clone(shards[i])
		delete(s, k)
		shards[i] = s
	}
	return pmap[K, V]{shards: shards, n: m.n - 1}
}

func (m pmap[K, V]) copyShards(k K) (*[shardCount]map[K]V, uint) {
	shards := new([shardCount]map[K]V)
	if m.shards != nil {
		*shards = *m.shards
	}
	return shards, k.shard()
}

// buildPmap indexes n entries at once, sizing each shard's map up front; entry(i) returns
// the i-th key and value. A later entry replaces an earlier one with the same key.
func buildPmap[K shardKey, V any](n int, entry func(i int) (K, V)) pmap[K, V] {
	if n == 0 {
		return pmap[K, V]{}
	}
	var sizes [shardCount]int
	keys := make([]uint16, n) // the shard of each entry
	for i := range n {
		k, _ := entry(i)
		keys[i] = uint16(k.shard())
		sizes[keys[i]]++
	}
	shards := new([shardCount]map[K]V)
	total := 0
	for i := range n {
		s := shards[keys[i]]
		if s == nil {
			s = make(map[K]V, sizes[keys[i]])
			shards[keys[i]] = s
		}
		k, v := entry(i)
		s[k] = v
	}
	for _, s := range shards {
		total += len(s)
	}
	return pmap[K, V]{shards: shards, n: total}
}

// routeOrder is the order of an ability's deployments: priority descending, then ref.
// Refs are unique in a table, so two entries compare equal only when they are the same
// deployment (listed once per occurrence of the ability in its Abilities).
func routeOrder(a, b *Deployment) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Ref.Namespace, b.Ref.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Ref.Name, b.Ref.Name)
}

// replaceListed returns a copy of ds, sorted by routeOrder, with the entries of from
// removed and to inserted n times (the number of times to lists the ability); from or
// to may be nil. ds itself is left as it was: older tables still use it. The result is
// nil when empty.
func replaceListed(ds []*Deployment, from, to *Deployment, n int) []*Deployment {
	lo, hi := 0, 0
	if from != nil {
		lo, _ = slices.BinarySearchFunc(ds, from, routeOrder)
		hi = lo
		for hi < len(ds) && ds[hi] == from {
			hi++
		}
	}
	size := len(ds) - (hi - lo)
	if to != nil {
		size += n
	}
	if size == 0 {
		return nil
	}
	out := make([]*Deployment, 0, size)
	out = append(out, ds[:lo]...)
	out = append(out, ds[hi:]...)
	if to != nil && n > 0 {
		at, _ := slices.BinarySearchFunc(out, to, routeOrder)
		kept := len(out)
		out = out[:kept+n]
		copy(out[at+n:], out[at:kept])
		for i := range n {
			out[at+i] = to
		}
	}
	return out
}

// withName returns a copy of the sorted set names with name added.
func withName(names []string, name string) []string {
	at, found := slices.BinarySearch(names, name)
	if found {
		return names
	}
	out := make([]string, 0, len(names)+1)
	out = append(out, names[:at]...)
	out = append(out, name)
	return append(out, names[at:]...)
}

// withoutName returns a copy of the sorted set names without name; nil when empty.
func withoutName(names []string, name string) []string {
	at, found := slices.BinarySearch(names, name)
	if !found {
		return names
	}
	if len(names) == 1 {
		return nil
	}
	out := make([]string, 0, len(names)-1)
	out = append(out, names[:at]...)
	return append(out, names[at+1:]...)
}
