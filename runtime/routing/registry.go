package routing

import "sync"

// Registry is the mutable side of the routing table: table builders (the controllers, or
// the standalone manifest loader) set or remove one deployment at a time, and the
// registry publishes immutable Tables to its Holder.
//
// Until Start is called, changes are only collected: at start-up every object is visited
// once and then one table is published, instead of one rebuild per object. After Start
// each change publishes a new table at once, so a reconciler that set an entry knows it is
// live when Set returns.
type Registry struct {
	holder *Holder

	onPublish func(models int) // may be nil

	mu      sync.Mutex
	entries map[Ref]Deployment
	visited map[Ref]bool // refs Set at least once, for the start-up sync
	started bool
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
	r := &Registry{holder: h, entries: make(map[Ref]Deployment), visited: make(map[Ref]bool)}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Set makes d the deployment for its ref, or removes ref when d is nil.
func (r *Registry) Set(ref Ref, d *Deployment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		r.visited[ref] = true
	}
	if d == nil {
		if _, ok := r.entries[ref]; !ok {
			return
		}
		delete(r.entries, ref)
	} else {
		r.entries[ref] = *d
	}
	if r.started {
		r.publishLocked()
	}
}

// Start publishes the collected entries, marks the holder synced and publishes every
// later change immediately.
func (r *Registry) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = true
	r.visited = nil
	r.publishLocked()
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
		if !r.visited[ref] {
			return false
		}
	}
	return true
}

// Live reports whether ref is in the published table.
func (r *Registry) Live(ref Ref) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.entries[ref]
	return ok && r.started
}

func (r *Registry) publishLocked() {
	all := make([]Deployment, 0, len(r.entries))
	for _, d := range r.entries {
		all = append(all, d)
	}
	r.holder.Store(NewTable(all))
	if r.onPublish != nil {
		r.onPublish(len(all))
	}
}
