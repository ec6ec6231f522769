package backends

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// name63 is the longest TrainJob name Kubernetes and Trainer accept.
var name63 = "t" + strings.Repeat("r", 61) + "n"

func dispatchOf(tjName string, attempt int32, uid string) *v1alpha1.Dispatch {
	d := &v1alpha1.Dispatch{}
	d.Namespace, d.Name = strings.Repeat("n", 63), "trainjob-"+tjName[:min(len(tjName), 40)]+"-0a1b2c3d-a1"
	d.Spec.TrainJob.Name = tjName
	d.Spec.TrainJob.UID = "3f9a1e2b-0c4d-4e5f-8a6b-7c8d9e0f1a2b"
	d.Spec.Workload = v1alpha1.WorkloadReference{Namespace: d.Namespace, Name: "trainjob-" + tjName + "-1a2b3", UID: types.UID(uid)}
	d.Spec.Attempt = attempt
	d.Spec.TargetName = strings.Repeat("target.", 36) + "x" // 253 characters
	return d
}

// jobSetPodName is the longest pod name JobSet's webhook computes for a
// replicated job (GenPodName plus a 5-character random suffix).
func jobSetPodName(js, rjob string, replicas, pods int) string {
	return fmt.Sprintf("%s-%s-%d-%d-abcde", js, rjob, replicas-1, pods-1)
}

func TestRemoteNameAtTheLimits(t *testing.T) {
	uid := "5c0e2a7e-8f1b-4d2c-9a3e-1b2c3d4e5f60"
	rjob := strings.Repeat("d", MaxReplicatedJobName)
	cases := map[string]struct {
		tjName  string
		attempt int32
		prefix  string // the name starts with it
	}{
		"short name":                {tjName: "bert", attempt: 1, prefix: "bert-"},
		"63-character name":         {tjName: name63, attempt: 1, prefix: name63[:15] + "-"},
		"63 characters, attempt 99": {tjName: name63, attempt: 99, prefix: name63[:14] + "-"},
		"63 characters, last int32": {tjName: name63, attempt: math.MaxInt32, prefix: name63[:6] + "-"},
		"cut before a dash":         {tjName: "abcdefghijklmn-pqrstuvw", attempt: 1, prefix: "abcdefghijklmn-"},
		"upper case and dots":       {tjName: "My.Job", attempt: 1, prefix: "my-job-"},
		"leading digit":             {tjName: "9lives", attempt: 1, prefix: "lives-"},
		"nothing usable":            {tjName: "0-1", attempt: 1, prefix: "job-"},
	}
	seen := map[string]string{}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := dispatchOf(tc.tjName, tc.attempt, uid)
			got := RemoteName(d)
			if len(got) > MaxRemoteName {
				t.Errorf("RemoteName = %q, %d bytes: more than %d", got, len(got), MaxRemoteName)
			}
			if !strings.HasPrefix(got, tc.prefix) {
				t.Errorf("RemoteName = %q, want prefix %q", got, tc.prefix)
			}
			if !strings.HasSuffix(got, fmt.Sprintf("-a%d", tc.attempt)) {
				t.Errorf("RemoteName = %q does not end with the attempt", got)
			}
			// LeaderWorkerSet names must be DNS-1035 labels; JobSet's
			// Jobs and pods are checked as DNS-1035 labels too.
			for _, s := range []string{got, jobSetPodName(got, rjob, 1, 10000), jobSetPodName(got, "node", 9, 1000)} {
				if errs := validation.IsDNS1035Label(s); len(errs) > 0 {
					t.Errorf("%q is not a DNS-1035 label: %v", s, errs)
				}
			}
			// A LeaderWorkerSet's pods: <name>-<group>-<worker>; its
			// StatefulSets' revision label: <name>-<group>-<10 hex>.
			for _, s := range []string{got + "-9999-9999", got + "-9999-0123456789"} {
				if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
					t.Errorf("%q is not a DNS-1123 label: %v", s, errs)
				}
			}
			if again := RemoteName(dispatchOf(tc.tjName, tc.attempt, uid)); again != got {
				t.Errorf("RemoteName is not stable: %q then %q", got, again)
			}
		})
		got := RemoteName(dispatchOf(tc.tjName, tc.attempt, uid))
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s share the remote name %q", name, other, got)
		}
		seen[got] = name
	}
	if a, b := RemoteName(dispatchOf(name63, 1, uid)), RemoteName(dispatchOf(name63, 1, "other-uid")); a == b {
		t.Errorf("two Workloads of one 63-character TrainJob name share the remote name %q", a)
	}
}

// TestRemoteNameKeepsTheRecordedName: work made under an earlier naming
// rule keeps being found through the name the agent recorded.
func TestRemoteNameKeepsTheRecordedName(t *testing.T) {
	d := dispatchOf(name63, 1, "uid")
	d.Status.Remote = &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "jobs", Name: "an-older-rule-0123456789-a1"}
	if got := RemoteName(d); got != "an-older-rule-0123456789-a1" {
		t.Errorf("RemoteName = %q, want the recorded name", got)
	}
}

func TestRemoteLabelsAreLabelValues(t *testing.T) {
	d := dispatchOf(name63, math.MaxInt32, "5c0e2a7e-8f1b-4d2c-9a3e-1b2c3d4e5f60")
	for k, v := range RemoteLabels(d) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("label key %q: %v", k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("label %s=%q: %v", k, v, errs)
		}
	}
	if got := RemoteLabels(d)[LabelTarget]; got != v1alpha1.LabelValue(d.Spec.TargetName) {
		t.Errorf("target label %q, want LabelValue of the target name", got)
	}
}

// TestTrainerReplicatedJobNamesFitTheBudget reads every runtime Trainer
// ships: MaxRemoteName leaves room for their replicated-job names.
func TestTrainerReplicatedJobNamesFitTheBudget(t *testing.T) {
	shipped, err := tytesting.AllShippedRuntimes()
	if err != nil {
		t.Fatal(err)
	}
	var runtimes int
	for path, rt := range shipped {
		runtimes++
		for _, rj := range rt.Spec.Template.Spec.ReplicatedJobs {
			if len(rj.Name) > MaxReplicatedJobName {
				t.Errorf("%s: replicated job %q is longer than %d", path, rj.Name, MaxReplicatedJobName)
			}
			pod := jobSetPodName(strings.Repeat("x", MaxRemoteName), rj.Name, 1, 10000)
			if errs := validation.IsDNS1035Label(pod); len(errs) > 0 {
				t.Errorf("%s: pod name %q: %v", path, pod, errs)
			}
		}
	}
	if runtimes < 5 {
		t.Fatalf("read %d runtimes under %s; want Trainer's shipped set", runtimes, tytesting.ShippedRuntimesDir)
	}
}
