package controllers

// The manager's permissions on Budgets (spec/budgets.md): it reads them on every replica
// to enforce them, and the leader writes their status from the shared counters and
// records the BudgetExhausted and BudgetRestored Events.

// +kubebuilder:rbac:groups=ai.switchboard.dev,resources=budgets,verbs=get;list;watch
// +kubebuilder:rbac:groups=ai.switchboard.dev,resources=budgets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
