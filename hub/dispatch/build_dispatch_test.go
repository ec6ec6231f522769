package dispatch

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
)

// The longest names users bring: a 63-character TrainJob (Kueue names its
// Workload "trainjob-<name>-<5 hex>", 78 characters) in a 63-character
// namespace, on a Target with a 253-character name.
var (
	name63     = "t" + strings.Repeat("r", 61) + "n"
	ns63       = "n" + strings.Repeat("s", 62)
	workload78 = "trainjob-" + name63 + "-1a2b3"
	target253  = strings.Repeat("target.", 36) + "x"
)

func TestDispatchLabelsAtTheLimits(t *testing.T) {
	cases := map[string]struct {
		wlName, wlNS, target string
		attempt              int32
	}{
		"short names":                    {wlName: "trainjob-bert-1a2b3", wlNS: "team-a", target: "spoke-a", attempt: 1},
		"Workload of a 63-character job": {wlName: workload78, wlNS: ns63, target: "spoke-a", attempt: 1},
		"253-character Workload name":    {wlName: strings.Repeat("w", 253), wlNS: ns63, target: target253, attempt: 1 << 30},
		"dotted Workload name":           {wlName: strings.Repeat("ab.", 30) + "c", wlNS: "team-a", target: "spoke.example.com", attempt: 12},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wl := kueuetesting.MakeWorkload(tc.wlName, tc.wlNS).UID("5c0e2a7e-8f1b-4d2c-9a3e-1b2c3d4e5f60").Obj()
			target := &v1alpha1.Target{
				ObjectMeta: metav1.ObjectMeta{Name: tc.target},
				Spec:       v1alpha1.TargetSpec{Agent: v1alpha1.AgentIdentity{Namespace: "agents"}},
			}
			tj := tjOf(name63)
			tjSnap := &v1alpha1.TrainJobSnapshot{Name: tj.Name, UID: tj.UID}
			d := buildDispatch(target, wl, tjSnap, &v1alpha1.RuntimeSnapshot{},
				placement.Request{}, placement.Decision{Target: tc.target}, tc.attempt)
			if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
				t.Errorf("Dispatch name %q: %v", d.Name, errs)
			}
			for k, v := range d.Labels {
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("label %s=%q: %v", k, v, errs)
				}
			}
			want := v1alpha1.WorkloadReference{Namespace: tc.wlNS, Name: tc.wlName, UID: wl.UID}
			if diff := cmp.Diff(want, d.Spec.Workload); diff != "" {
				t.Errorf("spec.workload (-want +got):\n%s", diff)
			}
			if got := workloadOfDispatch(d); len(got) != 1 ||
				got[0].NamespacedName != (types.NamespacedName{Namespace: tc.wlNS, Name: tc.wlName}) {
				t.Errorf("workloadOfDispatch = %v, want %s/%s", got, tc.wlNS, tc.wlName)
			}
		})
	}
}

// TestDispatchIsBornWithTheAgentsFinalizer: the hub creates each Dispatch
// with the agent's finalizer on, so the agent writes no patch for it and no
// remote work ever exists without it.
func TestDispatchIsBornWithTheAgentsFinalizer(t *testing.T) {
	wl := kueuetesting.MakeWorkload("wl", "team-a").UID("uid").Obj()
	target := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: "spoke-a"},
		Spec: v1alpha1.TargetSpec{Agent: v1alpha1.AgentIdentity{Namespace: "agents"}}}
	d := buildDispatch(target, wl, &v1alpha1.TrainJobSnapshot{}, &v1alpha1.RuntimeSnapshot{},
		placement.Request{}, placement.Decision{Target: target.Name}, 1)
	if diff := cmp.Diff([]string{v1alpha1.RemoteCleanupFinalizer}, d.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
}

func TestDispatchName(t *testing.T) {
	wl := func(name, uid string) *kueue.Workload {
		return kueuetesting.MakeWorkload(name, "team-a").UID(types.UID(uid)).Obj()
	}
	id := func(uid string) string {
		sum := sha256.Sum256([]byte(uid))
		return hex.EncodeToString(sum[:])[:8]
	}
	long := strings.Repeat("trainjob-", 30) // 270 characters

	if got, want := dispatchName(wl("trainjob-bert", "u-1"), 1), "trainjob-bert-"+id("u-1")+"-a1"; got != want {
		t.Errorf("dispatchName = %q, want %q", got, want)
	}
	if a, b := dispatchName(wl("x", "u-1"), 2), dispatchName(wl("x", "u-1"), 2); a != b {
		t.Errorf("dispatchName is not stable: %q then %q", a, b)
	}
	distinct := map[string]string{
		"attempt 1":               dispatchName(wl("x", "u-1"), 1),
		"attempt 2":               dispatchName(wl("x", "u-1"), 2),
		"attempt 12":              dispatchName(wl("x", "u-1"), 12),
		"another UID, same name":  dispatchName(wl("x", "u-2"), 1),
		"another UID, attempt 2":  dispatchName(wl("x", "u-2"), 2),
		"a long name":             dispatchName(wl(long, "u-1"), 1),
		"a long name, other UID":  dispatchName(wl(long, "u-2"), 1),
		"a long name, attempt 99": dispatchName(wl(long, "u-1"), 99),
	}
	seen := map[string]string{}
	for what, name := range distinct {
		if other, dup := seen[name]; dup {
			t.Errorf("%s and %s both name %q", what, other, name)
		}
		seen[name] = what
		// A DNS label: remote work carries it as a label value.
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("%s: %q is not a DNS label: %v", what, name, errs)
		}
	}
	if got := dispatchName(wl(long, "u-1"), 1); !strings.HasPrefix(got, long[:50]) || len(got) != 63 {
		t.Errorf("long name %q (%d bytes): want the start of the Workload name kept, 63 bytes in all", got, len(got))
	}
}
