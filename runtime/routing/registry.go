package routing

import "sync"

// Registry is the mutable side of the routing table: table builders (the controllers, or
// the standalone manifest loader) set or remove one deployment at a time, and the
// registry publishes immutable Tables to its Holder.
//
// Until Start is called, changes are only collected: at start-up every object is visited
// once and then one table is published, instead of one rebuild per object. After Start
// each change publishes a new table at once, so a reconciler that set an entry knows it is
// live when Set returns. That table is derived from the previous one (Table.replace): a
// change copies what it touches, not every entry, so publishing stays cheap at scale.
type Registry struct {
	holder *Holder

	onPublish func(models int) // may be nil

	mu sync.Mutex
	// collected maps every ref Set before Start to its deployment, or to nil once
	// removed: Visited needs the refs Set at least once. nil after Start, when table, the
	// last published table, is the only copy and each change derives the next from it.
	collected map[Ref]*Deployment
	started   bool
	table     *Table
	// perNamespace counts table's deployments of each namespace, so that a change
	// rebuilds the namespace list only when a namespace appears or disappears.
	perNamespace map[string]int
}

// RegistryOption configures a Registry.
type RegistryOption func(*Registry)

// OnPublish makes the registry call f with the number of deployments of every table it
// publishes, right after publishing it (for the routing-table metrics,
// spec/observability.md). f is called with the registry's lock held: it must be quick.
func OnPublish(f func(models int)) RegistryOption {
	return func(r *Registry) { r.onPublish = f }
}

// NewRegistry returns a registry publishing to h.
func NewRegistry(h *Holder, opts ...RegistryOption) *Registry {
	r := &Registry{holder: h, collected: make(map[Ref]*Deployment)}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Set makes a copy of d the deployment for ref, or removes ref when d is nil. The copy's
// Ref is ref. The copy shares d's slices: the caller must not modify them afterwards.
func (r *Registry) Set(ref Ref, d *Deployment) {
	var next *Deployment
	if d != nil {
		// A published deployment is never modified: a change is a new copy, so tables
		// that in-flight executions still hold keep the value they had.
		next = new(Deployment)
		*next = *d
		next.Ref, next.refString = ref, ref.String()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		r.collected[ref] = next
		return
	}
	prev, ok := r.table.Get(ref)
	if !ok && next == nil {
		return
	}
	namespaces := r.table.namespaces
	switch {
	case !ok:
		if r.perNamespace[ref.Namespace]++; r.perNamespace[ref.Namespace] == 1 {
			namespaces = withName(namespaces, ref.Namespace)
		}
	case next == nil:
		if r.perNamespace[ref.Namespace]--; r.perNamespace[ref.Namespace] == 0 {
			delete(r.perNamespace, ref.Namespace)
			namespaces = withoutName(namespaces, ref.Namespace)
		}
	}
	r.publishLocked(r.table.replace(prev, next, namespaces))
}

// Start publishes the collected entries, marks the holder synced and publishes every
// later change immediately.
func (r *Registry) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		r.publishLocked(r.table)
		r.holder.MarkSynced()
		return
	}
	r.started = true
	all := make([]*Deployment, 0, len(r.collected))
	for _, d := range r.collected {
		if d != nil {
			all = append(all, d)
		}
	}
	r.collected = nil
	t, perNamespace := buildTable(all)
	r.perNamespace = perNamespace
	r.publishLocked(t)
	r.holder.MarkSynced()
}

// Started reports whether Start has been called.
func (r *Registry) Started() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started
}

// Visited reports whether every ref has been Set at least once since the registry was
// created (always true after Start).
func (r *Registry) Visited(refs []Ref) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return true
	}
	for _, ref := range refs {
		if _, ok := r.collected[ref]; !ok {
			return false
		}
	}
	return true
}

// Live reports whether ref is in the published table.
func (r *Registry) Live(ref Ref) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		return false
	}
	_, ok := r.table.Get(ref)
	return ok
}

func (r *Registry) publishLocked(t *Table) {
	r.table = t
	r.holder.Store(t)
	if r.onPublish != nil {
		r.onPublish(t.Len())
	}
}
