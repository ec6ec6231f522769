package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

func admissionRequest(t *testing.T, op admissionv1.Operation, tj *trainer.TrainJob, dryRun bool) admission.Request {
	t.Helper()
	raw, err := json.Marshal(tj)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "req-1", Operation: op, Namespace: ns, Name: tj.Name,
		Object: runtime.RawExtension{Raw: raw}, DryRun: ptr.To(dryRun),
	}}
}

// patched applies the response's JSON patch to the request's object.
func patched(t *testing.T, req admission.Request, resp admission.Response) *trainer.TrainJob {
	t.Helper()
	ops, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatalf("decode patch %s: %v", ops, err)
	}
	raw, err := patch.Apply(req.Object.Raw)
	if err != nil {
		t.Fatalf("apply patch %s: %v", ops, err)
	}
	var tj trainer.TrainJob
	if err := json.Unmarshal(raw, &tj); err != nil {
		t.Fatal(err)
	}
	return &tj
}

func TestPinWebhookPatchesCreate(t *testing.T) {
	c := newClient(tyt.MakeClusterTrainingRuntime("torch-distributed").Obj())
	w := &PinWebhook{Reader: c, Writer: c}
	tj := tyt.MakeTrainJob("train", ns).Queue("q").NumNodes(2).Obj()
	req := admissionRequest(t, admissionv1.Create, tj, false)

	resp := w.Handle(context.Background(), req)
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response allowed=%v patchType=%v result=%+v, want an allowed JSON patch", resp.Allowed, resp.PatchType, resp.Result)
	}
	got := patched(t, req, resp)

	_, hash := mustEncode(t, tyt.TorchRuntimeSpec(1))
	want := tj.DeepCopy()
	want.Spec.RuntimeRef = trainer.RuntimeRef{
		Name: pinnedName("torch-distributed", hash), APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(trainer.TrainingRuntimeKind),
	}
	want.Annotations = map[string]string{AnnotationSource: "ClusterTrainingRuntime/torch-distributed", AnnotationHash: hash}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("patched TrainJob (-want +got):\n%s", diff)
	}
	if n := len(pinnedCopies(t, c, ns)); n != 1 {
		t.Errorf("got %d pinned copies, want 1", n)
	}
}

func TestPinWebhookAllowsWithoutPinning(t *testing.T) {
	runtimeRef := func(kind, name string) *trainer.TrainJob {
		return tyt.MakeTrainJob("train", ns).Queue("q").RuntimeRef(kind, name).Obj()
	}
	cases := map[string]struct {
		op     admissionv1.Operation
		tj     *trainer.TrainJob
		dryRun bool
	}{
		"a dry-run create":                   {op: admissionv1.Create, tj: runtimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed"), dryRun: true},
		"a dry-run create of a missing ref":  {op: admissionv1.Create, tj: runtimeRef(trainer.ClusterTrainingRuntimeKind, "missing"), dryRun: true},
		"an update":                          {op: admissionv1.Update, tj: runtimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed")},
		"a delete":                           {op: admissionv1.Delete, tj: runtimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed")},
		"a connect":                          {op: admissionv1.Connect, tj: runtimeRef(trainer.ClusterTrainingRuntimeKind, "missing")},
		"an update of an unsupported kind":   {op: admissionv1.Update, tj: runtimeRef("Other", "x")},
		"a dry-run create of an unsupported": {op: admissionv1.Create, tj: runtimeRef("Other", "x"), dryRun: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(tyt.MakeClusterTrainingRuntime("torch-distributed").Obj())
			w := &PinWebhook{Reader: c, Writer: c}
			resp := w.Handle(context.Background(), admissionRequest(t, tc.op, tc.tj, tc.dryRun))
			if !resp.Allowed || len(resp.Patches) != 0 {
				t.Errorf("response allowed=%v patches=%v result=%+v, want allowed without patches", resp.Allowed, resp.Patches, resp.Result)
			}
			if n := len(pinnedCopies(t, c, ns)); n != 0 {
				t.Errorf("got %d pinned copies, want none", n)
			}
		})
	}
}

func pinnedJob() *trainer.TrainJob {
	tj := tyt.MakeTrainJob("train", ns).Queue("q").RuntimeRef(trainer.TrainingRuntimeKind, "torch-distributed-0123456789ab").Obj()
	tj.Annotations = map[string]string{AnnotationSource: "ClusterTrainingRuntime/torch-distributed", AnnotationHash: "sha256:0123"}
	return tj
}

func TestPinWebhookRefuses(t *testing.T) {
	cases := map[string]struct {
		req      func(t *testing.T) admission.Request
		wantCode int32
		wantMsg  []string
	}{
		"a missing ClusterTrainingRuntime": {
			req: func(t *testing.T) admission.Request {
				return admissionRequest(t, admissionv1.Create, tyt.MakeTrainJob("train", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "no-such-runtime").Obj(), false)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"cannot pin", "ClusterTrainingRuntime", `"no-such-runtime"`},
		},
		"a TrainingRuntime missing from the job's namespace": {
			req: func(t *testing.T) admission.Request {
				return admissionRequest(t, admissionv1.Create, tyt.MakeTrainJob("train", ns).RuntimeRef(trainer.TrainingRuntimeKind, "torch-distributed").Obj(), false)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"TrainingRuntime", `"torch-distributed"`},
		},
		"an unsupported kind": {
			req: func(t *testing.T) admission.Request {
				return admissionRequest(t, admissionv1.Create, tyt.MakeTrainJob("train", ns).RuntimeRef("Other", "x").Obj(), false)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"unsupported runtime kind", `"Other"`},
		},
		"a job created with the pin annotations": {
			req: func(t *testing.T) admission.Request {
				return admissionRequest(t, admissionv1.Create, pinnedJob(), false)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"set by trainyard only", AnnotationSource, AnnotationHash},
		},
		"a dry-run create with the pin annotations": {
			req: func(t *testing.T) admission.Request {
				return admissionRequest(t, admissionv1.Create, pinnedJob(), true)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"set by trainyard only"},
		},
		"a job created with only the hash annotation": {
			req: func(t *testing.T) admission.Request {
				tj := tyt.MakeTrainJob("train", ns).Queue("q").Obj()
				tj.Annotations = map[string]string{AnnotationHash: ""}
				return admissionRequest(t, admissionv1.Create, tj, false)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"set by trainyard only"},
		},
		"an object that is not JSON": {
			req: func(*testing.T) admission.Request {
				return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
					Operation: admissionv1.Create, Namespace: ns, Object: runtime.RawExtension{Raw: []byte("{not json")},
				}}
			},
			wantCode: http.StatusBadRequest,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(tyt.MakeClusterTrainingRuntime("torch-distributed").Obj())
			w := &PinWebhook{Reader: c, Writer: c}
			resp := w.Handle(context.Background(), tc.req(t))
			if resp.Allowed || resp.Result == nil || resp.Result.Code != tc.wantCode {
				t.Fatalf("response allowed=%v result=%+v, want refused with code %d", resp.Allowed, resp.Result, tc.wantCode)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(resp.Result.Message, m) {
					t.Errorf("message %q does not contain %q", resp.Result.Message, m)
				}
			}
			if n := len(pinnedCopies(t, c, ns)); n != 0 {
				t.Errorf("got %d pinned copies, want none", n)
			}
		})
	}
}

// TestPinWebhookNamespaceFromRequest: an object without a namespace is
// pinned into the request's namespace.
func TestPinWebhookNamespaceFromRequest(t *testing.T) {
	c := newClient(tyt.MakeClusterTrainingRuntime("torch-distributed").Obj())
	w := &PinWebhook{Reader: c, Writer: c}
	tj := tyt.MakeTrainJob("train", "").Obj()
	resp := w.Handle(context.Background(), admissionRequest(t, admissionv1.Create, tj, false))
	if !resp.Allowed {
		t.Fatalf("response refused: %+v", resp.Result)
	}
	if n := len(pinnedCopies(t, c, ns)); n != 1 {
		t.Errorf("got %d pinned copies in %s, want 1", n, ns)
	}
}

// admissionChain is a Probe standing for the webhooks after the pinning
// one: it answers dry-run creates as Kueue's TrainJob webhook does while
// its cache has not seen the runtime, missing times, then with answer.
type admissionChain struct {
	client.Writer
	missing int
	answer  error
	probes  []*trainer.TrainJob
}

func (a *admissionChain) Create(_ context.Context, o client.Object, opts ...client.CreateOption) error {
	tj := o.(*trainer.TrainJob)
	co := &client.CreateOptions{}
	co.ApplyOptions(opts)
	if len(co.DryRun) == 0 {
		return errors.New("the probe must be a dry run")
	}
	a.probes = append(a.probes, tj)
	if len(a.probes) <= a.missing {
		return apierrors.NewInternalError(fmt.Errorf("runtime '%s' not found", tj.Spec.RuntimeRef.Name))
	}
	return a.answer
}

// TestPinWebhookWaitsForTheAdmissionChain: the first job of a new runtime
// is answered only once the webhooks after this one see its copy; any other
// answer of theirs ends the wait (the real create meets it); a copy made
// long ago is not probed.
func TestPinWebhookWaitsForTheAdmissionChain(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		chain      admissionChain
		oldCopy    bool
		wantProbes int
	}{
		"copy seen at the third probe":   {chain: admissionChain{missing: 2}, wantProbes: 3},
		"another refusal ends the probe": {chain: admissionChain{answer: apierrors.NewBadRequest("spec.trainer: invalid")}, wantProbes: 1},
		"a copy made long ago":           {chain: admissionChain{missing: 100}, oldCopy: true, wantProbes: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := []client.Object{tyt.MakeClusterTrainingRuntime("torch-distributed").Obj()}
			if tc.oldCopy {
				_, hash := mustEncode(t, tyt.TorchRuntimeSpec(1))
				old := trainingRuntime(pinnedName("torch-distributed", hash), ns, tyt.TorchRuntimeSpec(1))
				old.Labels = map[string]string{LabelPinned: "true"}
				old.Annotations = map[string]string{AnnotationSource: "ClusterTrainingRuntime/torch-distributed", AnnotationHash: hash,
					AnnotationPinnedAt: now.Add(-time.Second).Format(time.RFC3339)}
				old.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
				objs = append(objs, old)
			}
			c := newClient(objs...)
			chain := tc.chain
			w := &PinWebhook{Reader: c, Writer: c, Cache: c, Probe: &chain, Clock: testingclock.NewFakePassiveClock(now), RestampAfter: time.Minute}
			tj := tyt.MakeTrainJob("train", ns).Queue("q").Obj()
			resp := w.Handle(context.Background(), admissionRequest(t, admissionv1.Create, tj, false))
			if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			if len(chain.probes) != tc.wantProbes {
				t.Errorf("%d probes, want %d", len(chain.probes), tc.wantProbes)
			}
			for _, p := range chain.probes {
				if _, ok := p.Annotations[AnnotationHash]; ok {
					t.Errorf("probe carries the pin annotations, which the pinning webhook refuses")
				}
				if !strings.HasPrefix(p.Spec.RuntimeRef.Name, "torch-distributed-") {
					t.Errorf("probe runs runtime %q, want the pinned copy", p.Spec.RuntimeRef.Name)
				}
			}
		})
	}
}
