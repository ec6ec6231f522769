package dashboard

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// CohortView is a Kueue cohort with its ClusterQueues; Name is empty for
// the ClusterQueues in no cohort, which have no Totals.
type CohortView struct {
	Name   string
	Totals []UsageView
	Queues []QueueView
}

// QueueView is one ClusterQueue's usage against its quota.
type QueueView struct {
	Name                         string
	Pending, Reserving, Admitted int32
	Usage                        []UsageView
}

// UsageView is one flavor and resource: nominal quota, usage (admitted
// workloads), reservation (workloads holding quota) and the part borrowed
// from the cohort.
type UsageView struct {
	Flavor, Resource                  string
	Nominal, Used, Reserved, Borrowed string
	UsedPercent, ReservedPercent      int
	// UsedWide and ReservedWide are the bars' widths in percent, at most 100.
	UsedWide, ReservedWide int
	// Over is true when usage exceeds the nominal quota (borrowing).
	Over bool
}

// usageKey is one flavor and resource of a ClusterQueue.
type usageKey struct {
	flavor   kueue.ResourceFlavorReference
	resource corev1.ResourceName
}

// usage sums the quantities of one usageKey.
type usage struct {
	nominal, used, reserved, borrowed resource.Quantity
}

// buildQuota groups ClusterQueues by cohort, cohorts by name, queues in no
// cohort last.
func buildQuota(cqs []kueue.ClusterQueue) []CohortView {
	byCohort := map[kueue.CohortReference][]*kueue.ClusterQueue{}
	for i := range cqs {
		byCohort[cqs[i].Spec.CohortName] = append(byCohort[cqs[i].Spec.CohortName], &cqs[i])
	}
	names := make([]kueue.CohortReference, 0, len(byCohort))
	for n := range byCohort {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b kueue.CohortReference) int {
		if (a == "") != (b == "") {
			return cmp.Compare(b, a) // "" last
		}
		return cmp.Compare(a, b)
	})
	var out []CohortView
	for _, n := range names {
		members := byCohort[n]
		slices.SortFunc(members, func(a, b *kueue.ClusterQueue) int { return cmp.Compare(a.Name, b.Name) })
		cv := CohortView{Name: string(n)}
		totals := map[usageKey]*usage{}
		var order []usageKey
		for _, cq := range members {
			u, keys := queueUsage(cq)
			q := QueueView{Name: cq.Name, Pending: cq.Status.PendingWorkloads, Reserving: cq.Status.ReservingWorkloads, Admitted: cq.Status.AdmittedWorkloads}
			for _, k := range keys {
				q.Usage = append(q.Usage, usageView(k, u[k]))
				t, ok := totals[k]
				if !ok {
					t = &usage{}
					totals[k] = t
					order = append(order, k)
				}
				t.nominal.Add(u[k].nominal)
				t.used.Add(u[k].used)
				t.reserved.Add(u[k].reserved)
				t.borrowed.Add(u[k].borrowed)
			}
			cv.Queues = append(cv.Queues, q)
		}
		if n != "" {
			for _, k := range order {
				cv.Totals = append(cv.Totals, usageView(k, totals[k]))
			}
		}
		out = append(out, cv)
	}
	return out
}

// queueUsage reads a ClusterQueue's quota from its spec and its usage and
// reservation from its status. keys keep the spec's order, then usage of
// resources without quota.
func queueUsage(cq *kueue.ClusterQueue) (map[usageKey]*usage, []usageKey) {
	u := map[usageKey]*usage{}
	var keys []usageKey
	get := func(k usageKey) *usage {
		if _, ok := u[k]; !ok {
			u[k] = &usage{}
			keys = append(keys, k)
		}
		return u[k]
	}
	for _, rg := range cq.Spec.ResourceGroups {
		for _, f := range rg.Flavors {
			for _, r := range f.Resources {
				get(usageKey{f.Name, r.Name}).nominal = r.NominalQuota.DeepCopy()
			}
		}
	}
	for _, f := range cq.Status.FlavorsUsage {
		for _, r := range f.Resources {
			e := get(usageKey{f.Name, r.Name})
			e.used, e.borrowed = r.Total.DeepCopy(), r.Borrowed.DeepCopy()
		}
	}
	for _, f := range cq.Status.FlavorsReservation {
		for _, r := range f.Resources {
			get(usageKey{f.Name, r.Name}).reserved = r.Total.DeepCopy()
		}
	}
	return u, keys
}

func usageView(k usageKey, u *usage) UsageView {
	v := UsageView{
		Flavor: string(k.flavor), Resource: string(k.resource),
		Nominal: u.nominal.String(), Used: u.used.String(), Reserved: u.reserved.String(), Borrowed: u.borrowed.String(),
	}
	nominal := u.nominal.AsApproximateFloat64()
	used, reserved := u.used.AsApproximateFloat64(), u.reserved.AsApproximateFloat64()
	v.UsedPercent, v.ReservedPercent = percent(used, nominal), percent(reserved, nominal)
	v.Over = used > nominal
	v.UsedWide, v.ReservedWide = min(v.UsedPercent, 100), min(v.ReservedPercent, 100)
	return v
}

// percent is part of whole in percent; any part of no whole is 100.
func percent(part, whole float64) int {
	switch {
	case whole > 0:
		return int(part / whole * 100)
	case part > 0:
		return 100
	}
	return 0
}
