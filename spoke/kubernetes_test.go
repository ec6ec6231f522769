package spoke

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/trainyard-dev/trainyard/backends"
)

func TestRequireKind(t *testing.T) {
	jobSets := &metav1.APIResourceList{GroupVersion: "jobset.x-k8s.io/v1alpha2",
		APIResources: []metav1.APIResource{{Name: "jobsets", Kind: "JobSet", Namespaced: true}}}
	onlyStatus := &metav1.APIResourceList{GroupVersion: "leaderworkerset.x-k8s.io/v1",
		APIResources: []metav1.APIResource{{Name: "leaderworkersets/status", Kind: "Status"}}}
	cases := []struct {
		name   string
		served []*metav1.APIResourceList
		kind   backends.Kind
		want   string // in the error; empty: no error
	}{
		{name: "JobSet served", served: []*metav1.APIResourceList{jobSets}, kind: backends.KindJobSet},
		{name: "JobSet missing", kind: backends.KindJobSet, want: "install JobSet v0.11 or later"},
		{name: "LeaderWorkerSet missing", served: []*metav1.APIResourceList{jobSets}, kind: backends.KindLeaderWorkerSet,
			want: "does not serve leaderworkerset.x-k8s.io/v1 LeaderWorkerSet (install LeaderWorkerSet v0.8"},
		{name: "group served without the kind", served: []*metav1.APIResourceList{onlyStatus}, kind: backends.KindLeaderWorkerSet,
			want: "leaderworkerset.x-k8s.io/v1 serves no LeaderWorkerSet"},
		{name: "no remote kind to check", kind: backends.KindSlurm},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := fake.NewClientset().Discovery().(*fakediscovery.FakeDiscovery)
			d.Resources = tc.served
			err := requireKind(d, "spoke1", tc.kind)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("requireKind: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("requireKind = %v, want an error with %q", err, tc.want)
			case err != nil && !strings.HasPrefix(err.Error(), "target spoke1 runs jobs as "):
				t.Fatalf("requireKind = %v, want it to name the target", err)
			}
		})
	}
}
