package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/budget"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// BudgetOptions wires Budgets (spec/budgets.md) into the controllers: where every
// replica publishes the Budgets it enforces, and what the status writer reads.
type BudgetOptions struct {
	// Holder receives the compiled Budgets; the runtime's enforcer reads it.
	Holder *budget.Holder
	// Table is the routing table the replica serves from: the deployments a Budget
	// governs, for its Ready condition.
	Table interface{ Load() *routing.Table }
	// Store holds the counters status is written from.
	Store eventstore.Budgets
	// Metrics receives each window's use; nil records none.
	Metrics BudgetMetrics
	// Now is the clock windows are computed on; nil means time.Now.
	Now func() time.Time
}

// BudgetMetrics records what Budgets used (telemetry.Metrics implements it).
type BudgetMetrics interface {
	BudgetWindow(b *budget.Budget, w budget.WindowUsage)
	ForgetBudget(namespace, name string)
}

// CompileBudget converts a Budget object into what the runtime enforces. It never
// fails: a Budget it cannot evaluate (a selector or a time zone that does not parse —
// the API server has checked the rest) is compiled Invalid, which takes every deployment
// it governs out of routing for its subjects (spec/budgets.md, "Fail closed"). The
// message says why; it names fields, never values.
func CompileBudget(b *v1alpha1.Budget) (out budget.Budget, invalid string) {
	out = budget.Budget{
		UID:        string(b.UID),
		Namespace:  b.Namespace,
		Name:       b.Name,
		PerSubject: b.Spec.PerSubject,
		Audit:      b.Spec.Action == v1alpha1.BudgetActionAudit,
	}
	if out.UID == "" {
		// A manifest has no uid: its namespace and name stand in, as for Secrets.
		out.UID = "file:" + b.Namespace + "/" + b.Name
	}
	for _, s := range b.Spec.Subjects {
		out.Subjects = append(out.Subjects, budget.Subject{Kind: budget.SubjectKind(s.Kind), Namespace: s.Namespace, Name: s.Name})
	}
	if b.Spec.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector.AsLabelSelector())
		if err != nil {
			out.Invalid = true
			invalid = "spec.selector: " + err.Error()
		} else {
			out.Selects = func(l map[string]string) bool { return sel.Matches(labels.Set(l)) }
		}
	}
	for i, l := range b.Spec.Limits {
		field := "spec.limits[" + strconv.Itoa(i) + "]"
		w, err := budget.ParseWindow(string(l.Window))
		if err != nil && invalid == "" {
			out.Invalid, invalid = true, field+".window: "+err.Error()
		}
		loc, err := time.LoadLocation(l.TimeZone) // "" is UTC
		if err != nil {
			loc = time.UTC
			if invalid == "" {
				out.Invalid, invalid = true, field+".timeZone: not a time zone this runtime knows"
			}
		}
		lim := budget.Limit{Window: w, Location: loc}
		if l.Cost != nil {
			if lim.Cost, err = pricing.ParseDecimal(string(*l.Cost)); err != nil && invalid == "" {
				out.Invalid, invalid = true, field+".cost: "+err.Error()
			}
		}
		if l.Tokens != nil {
			lim.Tokens = *l.Tokens
		}
		if l.Requests != nil {
			lim.Requests = *l.Requests
		}
		out.Limits = append(out.Limits, lim)
	}
	return out, invalid
}

// compileBudgets compiles objs into the Set every replica enforces.
func compileBudgets(objs []v1alpha1.Budget) *budget.Set {
	list := make([]budget.Budget, 0, len(objs))
	for i := range objs {
		b, _ := CompileBudget(&objs[i])
		list = append(list, b)
	}
	return budget.NewSet(list)
}

// budgetPublisher publishes the compiled Budgets of the cache on every replica,
// whenever one changes. Budgets are few and compile fast, so every change republishes
// them all.
type budgetPublisher struct {
	client client.Client
	holder *budget.Holder
	synced atomic.Bool
}

func (p *budgetPublisher) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	return reconcile.Result{}, p.publish(ctx)
}

func (p *budgetPublisher) publish(ctx context.Context) error {
	list := &v1alpha1.BudgetList{}
	if err := p.client.List(ctx, list); err != nil {
		return fmt.Errorf("list budgets: %w", err)
	}
	p.holder.Store(compileBudgets(list.Items))
	return nil
}

// initialBudgets publishes the Budgets present at start-up once the cache has synced,
// before the replica reports ready: a replica must not serve before it knows what to
// enforce.
type initialBudgets struct {
	publisher *budgetPublisher
	cache     interface{ WaitForCacheSync(context.Context) bool }
}

func (s *initialBudgets) NeedLeaderElection() bool { return false }

func (s *initialBudgets) Start(ctx context.Context) error {
	if !s.cache.WaitForCacheSync(ctx) {
		return nil
	}
	// The cache has synced, so a failure is transient (an informer still starting): the
	// replica stays unready and tries again.
	for {
		err := s.publisher.publish(ctx)
		if err == nil {
			break
		}
		ctrl.LoggerFrom(ctx).Error(err, "Cannot publish the Budgets yet; retrying")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	s.publisher.synced.Store(true)
	return nil
}

// SetupBudgets registers, with mgr, the publisher that compiles the Budgets on every
// replica into o.Holder, and the status writer that runs on the leader. synced reports
// whether the Budgets present at start-up are published: the runtime is not ready
// before.
func SetupBudgets(mgr ctrl.Manager, o BudgetOptions) (synced func() bool, err error) {
	// The informer exists before the manager starts, so that the first publication
	// lists a synced cache (cached reads of a type without one fail: Options.ApplyTo).
	if _, err := mgr.GetCache().GetInformer(context.Background(), &v1alpha1.Budget{}); err != nil {
		return nil, fmt.Errorf("budget informer: %w", err)
	}
	p := &budgetPublisher{client: mgr.GetClient(), holder: o.Holder}
	notLeaderOnly := false
	if err := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Budget{}).
		Named("budget").
		WithOptions(controller.Options{NeedLeaderElection: &notLeaderOnly}).
		Complete(p); err != nil {
		return nil, fmt.Errorf("set up budget controller: %w", err)
	}
	if err := mgr.Add(&initialBudgets{publisher: p, cache: mgr.GetCache()}); err != nil {
		return nil, err
	}
	w := &budgetStatusWriter{client: mgr.GetClient(), recorder: mgr.GetEventRecorder("switchboard"), o: o, written: map[types.UID]time.Time{}}
	if err := mgr.Add(w); err != nil {
		return nil, err
	}
	return p.synced.Load, nil
}

// Status writing (spec/budgets.md, "Status, conditions and Events").
const (
	// budgetCheckInterval is how often the leader reads the counters of every Budget: an
	// Exhausted transition is written within it.
	budgetCheckInterval = 2 * time.Second
	// budgetStatusInterval is how stale a Budget's status may get while only its use
	// changes.
	budgetStatusInterval = 10 * time.Second
)

// budgetStatusWriter writes every Budget's status from the store's counters, on the
// leader: at once when a condition changes (Exhausted with an Event), else at most
// every budgetStatusInterval when the figures it reports changed.
type budgetStatusWriter struct {
	client   client.Client
	recorder recorder.EventRecorder
	o        BudgetOptions
	written  map[types.UID]time.Time
	known    map[types.NamespacedName]bool // Budgets whose metrics exist
}

func (w *budgetStatusWriter) NeedLeaderElection() bool { return true }

func (w *budgetStatusWriter) Start(ctx context.Context) error {
	t := time.NewTicker(budgetCheckInterval)
	defer t.Stop()
	for {
		w.writeAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (w *budgetStatusWriter) now() time.Time {
	if w.o.Now != nil {
		return w.o.Now()
	}
	return time.Now()
}

func (w *budgetStatusWriter) writeAll(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx).WithName("budget-status")
	list := &v1alpha1.BudgetList{}
	if err := w.client.List(ctx, list); err != nil {
		log.Error(err, "List Budgets failed")
		return
	}
	seen := map[types.NamespacedName]bool{}
	for i := range list.Items {
		obj := &list.Items[i]
		seen[types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}] = true
		if err := w.write(ctx, obj); err != nil && ctx.Err() == nil {
			log.Error(err, "Cannot write Budget status", "budget", client.ObjectKeyFromObject(obj))
		}
	}
	for key := range w.known {
		if !seen[key] && w.o.Metrics != nil {
			w.o.Metrics.ForgetBudget(key.Namespace, key.Name)
		}
	}
	w.known = seen
}

// write computes obj's status and writes it when due.
func (w *budgetStatusWriter) write(ctx context.Context, obj *v1alpha1.Budget) error {
	now := w.now()
	b, invalid := CompileBudget(obj)
	st, windows, err := BudgetStatus(ctx, w.o, &b, invalid, now)
	if err != nil {
		return err
	}
	if w.o.Metrics != nil {
		for _, u := range windows {
			w.o.Metrics.BudgetWindow(&b, u)
		}
	}
	st.ObservedGeneration = obj.Generation
	before := obj.DeepCopy()
	wasExhausted := meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionExhausted)
	conditions := slices.Clone(obj.Status.Conditions) // SetStatusCondition edits in place
	for _, c := range st.Conditions {
		meta.SetStatusCondition(&conditions, c)
	}
	st.Conditions = conditions
	isExhausted := meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionExhausted)
	transition := wasExhausted != isExhausted
	if equality.Semantic.DeepEqual(obj.Status, st) {
		return nil
	}
	if !transition && sameConditions(before.Status.Conditions, st.Conditions) && obj.Status.ObservedGeneration == obj.Generation &&
		now.Sub(w.written[obj.UID]) < budgetStatusInterval {
		return nil // only the figures moved; they are written at the next interval
	}
	obj.Status = st
	if err := w.client.Status().Patch(ctx, obj, client.MergeFrom(before)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	w.written[obj.UID] = now
	if transition {
		if isExhausted {
			w.recorder.Eventf(obj, nil, corev1.EventTypeWarning, v1alpha1.ReasonBudgetExhausted, "Enforce",
				"a limit of the Budget is reached: %s", st.Used)
		} else {
			w.recorder.Eventf(obj, nil, corev1.EventTypeNormal, v1alpha1.ReasonBudgetRestored, "Enforce",
				"the Budget is within its limits again")
		}
	}
	return nil
}

// sameConditions reports whether a and b hold the same conditions with the same status
// and reason: a change of either is written at once.
func sameConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range b {
		o := meta.FindStatusCondition(a, c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason {
			return false
		}
	}
	return true
}

// BudgetStatus computes the status of b at now from the store's counters: its windows,
// the tightest of them for the printer columns, and its Ready and Exhausted conditions
// (without transition times, which the caller merges). invalid is CompileBudget's
// message, "" for a valid Budget.
func BudgetStatus(ctx context.Context, o BudgetOptions, b *budget.Budget, invalid string, now time.Time) (v1alpha1.BudgetStatus, []budget.WindowUsage, error) {
	var st v1alpha1.BudgetStatus
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonEnforced,
		Message: "the Budget is enforced on every model it governs"}
	currency := ""
	if invalid != "" {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, invalid
	} else if t := o.Table.Load(); t != nil {
		currency = budget.Currency(b, t)
		for _, d := range t.Deployments() {
			if !b.Governs(d) {
				continue
			}
			if reason := budget.Check(b, d, currency); reason != "" {
				ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, reason, readyMessage(reason, d)
				break
			}
		}
	}
	exhausted := metav1.Condition{Type: v1alpha1.ConditionExhausted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonWithinLimits,
		Message: "every limit has room"}
	st.Conditions = []metav1.Condition{ready, exhausted}
	if invalid != "" {
		return st, nil, nil
	}
	windows, err := budget.Report(ctx, o.Store, b, now)
	if err != nil {
		return st, nil, err
	}
	tightest := -1
	for i, u := range windows {
		ws := v1alpha1.BudgetWindowStatus{
			Window: v1alpha1.BudgetWindow(u.Window), TimeZone: u.TimeZone,
			Start: metav1.NewTime(u.Start), ResetAt: metav1.NewTime(u.ResetAt),
			Used: amounts(u.Used, u.Limit, pricing.Format), Limit: amounts(u.Limit, u.Limit, limitDecimal),
			Percent: int32(min(u.Percent(), 1<<30)),
		}
		st.Windows = append(st.Windows, ws)
		if tightest < 0 || ws.Percent > st.Windows[tightest].Percent {
			tightest = i
		}
		if u.Exhausted() {
			st.Conditions[1] = metav1.Condition{Type: v1alpha1.ConditionExhausted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonLimitReached,
				Message: "the " + string(u.Window) + " window has used its whole limit until " + u.ResetAt.Format(time.RFC3339)}
		}
	}
	if tightest >= 0 {
		u := windows[tightest]
		st.Window = v1alpha1.BudgetWindow(u.Window)
		st.Used, st.Limit = display(u, u.Used, currency), display(u, u.Limit, currency)
		st.Percent = st.Windows[tightest].Percent
	}
	return st, windows, nil
}

// readyMessage explains a fail-closed reason; it names the deployment, which the
// Budget's readers may see, never a price.
func readyMessage(reason string, d *routing.Deployment) string {
	switch reason {
	case budget.ReasonNoPricing:
		return "ModelDeployment " + d.Ref.Name + " has no spec.pricing; it is out of routing for the Budget's subjects"
	case budget.ReasonNoOutputCap:
		return "ModelDeployment " + d.Ref.Name + " has no spec.limits.maxOutputTokens; it is out of routing for the Budget's subjects"
	case budget.ReasonCurrencyMismatch:
		return "the governed ModelDeployments are priced in more than one currency; they are out of routing for the Budget's subjects"
	}
	return reason
}

// amounts renders the units a limit sets of a, cost with format; the others are left
// out.
func amounts(a, limit budget.Amounts, format func(pricing.Micro) string) v1alpha1.BudgetAmounts {
	var out v1alpha1.BudgetAmounts
	if limit.Cost > 0 {
		out.Cost = format(a.Cost)
	}
	if limit.Tokens > 0 {
		out.Tokens = &a.Tokens
	}
	if limit.Requests > 0 {
		out.Requests = &a.Requests
	}
	return out
}

// limitDecimal writes a limit as operators write one: no trailing zeros beyond two
// decimals ("500.00", "0.0831"), where used figures keep all six.
func limitDecimal(m pricing.Micro) string {
	s := strings.TrimRight(pricing.Format(m), "0")
	if i := strings.IndexByte(s, '.'); len(s)-i-1 < 2 {
		s += strings.Repeat("0", 2-(len(s)-i-1))
	}
	return s
}

// display renders the unit of the window that decides its percent, for the printer
// columns: "123.46 USD", "4500 tokens", "12 requests".
func display(u budget.WindowUsage, a budget.Amounts, currency string) string {
	type unit struct {
		share int64
		text  string
	}
	var units []unit
	if u.Limit.Cost > 0 {
		units = append(units, unit{u.Used.Cost * 100 / u.Limit.Cost, strings.TrimSpace(strconv.FormatFloat(float64(a.Cost)/pricing.MicroPerUnit, 'f', 2, 64) + " " + currency)})
	}
	if u.Limit.Tokens > 0 {
		units = append(units, unit{u.Used.Tokens * 100 / u.Limit.Tokens, strconv.FormatInt(a.Tokens, 10) + " tokens"})
	}
	if u.Limit.Requests > 0 {
		units = append(units, unit{u.Used.Requests * 100 / u.Limit.Requests, strconv.FormatInt(a.Requests, 10) + " requests"})
	}
	if len(units) == 0 {
		return ""
	}
	best := slices.MaxFunc(units, func(a, b unit) int { return int(a.share - b.share) })
	return best.text
}
