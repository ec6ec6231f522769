package snapshot

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
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

// patchedRaw applies the response's JSON patch to the request's object, as
// the API server stores it.
func patchedRaw(t *testing.T, req admission.Request, resp admission.Response) []byte {
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
	return raw
}

// patched is patchedRaw's TrainJob.
func patched(t *testing.T, req admission.Request, resp admission.Response) *trainer.TrainJob {
	t.Helper()
	var tj trainer.TrainJob
	if err := json.Unmarshal(patchedRaw(t, req, resp), &tj); err != nil {
		t.Fatal(err)
	}
	return &tj
}

// TestPinWebhookPatchesCreate: a create is pinned through the annotations
// only, and suspended until Kueue admits it (what Kueue's TrainJob webhook
// did); runtimeRef and the rest of the spec stay as written. A dry run is
// suspended but not pinned.
func TestPinWebhookPatchesCreate(t *testing.T) {
	_, hash := mustEncode(t, tytesting.TorchRuntimeSpec(1))
	pin := map[string]string{v1alpha1.AnnotationRuntimeSource: "ClusterTrainingRuntime/torch-distributed", v1alpha1.AnnotationRuntimeHash: hash}
	cases := map[string]struct {
		tj         *trainer.TrainJob
		dryRun     bool
		wantPin    map[string]string
		wantCopies int
	}{
		"a queued job":                {tj: tytesting.MakeTrainJob("train", ns).Queue("q").NumNodes(2).Obj(), wantPin: pin, wantCopies: 1},
		"a job asking to run at once": {tj: tytesting.MakeTrainJob("train", ns).Queue("q").Suspend(false).Obj(), wantPin: pin, wantCopies: 1},
		"a dry run":                   {tj: tytesting.MakeTrainJob("train", ns).Queue("q").Obj(), dryRun: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
			w := &PinWebhook{Reader: c, Client: c}
			req := admissionRequest(t, admissionv1.Create, tc.tj, tc.dryRun)
			resp := w.Handle(context.Background(), req)
			if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
				t.Fatalf("response allowed=%v patchType=%v result=%+v, want an allowed JSON patch", resp.Allowed, resp.PatchType, resp.Result)
			}
			want := tc.tj.DeepCopy()
			want.Spec.Suspend = ptr.To(true)
			want.Annotations = tc.wantPin
			if diff := cmp.Diff(want, patched(t, req, resp)); diff != "" {
				t.Errorf("patched TrainJob (-want +got):\n%s", diff)
			}
			if n := len(pinnedCopies(t, c, ns)); n != tc.wantCopies {
				t.Errorf("got %d pinned copies, want %d", n, tc.wantCopies)
			}
		})
	}
}

func TestPinWebhookAllowsWithoutPinning(t *testing.T) {
	runtimeRef := func(kind, name string) *trainer.TrainJob {
		return tytesting.MakeTrainJob("train", ns).Queue("q").Suspend(true).RuntimeRef(kind, name).Obj()
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
			c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
			w := &PinWebhook{Reader: c, Client: c}
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
	tj := tytesting.MakeTrainJob("train", ns).Queue("q").RuntimeRef(trainer.TrainingRuntimeKind, "torch-distributed-0123456789ab").Obj()
	tj.Annotations = map[string]string{v1alpha1.AnnotationRuntimeSource: "ClusterTrainingRuntime/torch-distributed", v1alpha1.AnnotationRuntimeHash: "sha256:0123"}
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
				return admissionRequest(t, admissionv1.Create, tytesting.MakeTrainJob("train", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "no-such-runtime").Obj(), false)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"cannot pin", "ClusterTrainingRuntime", `"no-such-runtime"`},
		},
		"a TrainingRuntime missing from the job's namespace": {
			req: func(t *testing.T) admission.Request {
				return admissionRequest(t, admissionv1.Create, tytesting.MakeTrainJob("train", ns).RuntimeRef(trainer.TrainingRuntimeKind, "torch-distributed").Obj(), false)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"TrainingRuntime", `"torch-distributed"`},
		},
		"an unsupported kind": {
			req: func(t *testing.T) admission.Request {
				return admissionRequest(t, admissionv1.Create, tytesting.MakeTrainJob("train", ns).RuntimeRef("Other", "x").Obj(), false)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"unsupported runtime kind", `"Other"`},
		},
		"a job created with the pin annotations": {
			req: func(t *testing.T) admission.Request {
				return admissionRequest(t, admissionv1.Create, pinnedJob(), false)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"set by trainyard only", v1alpha1.AnnotationRuntimeSource, v1alpha1.AnnotationRuntimeHash},
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
				tj := tytesting.MakeTrainJob("train", ns).Queue("q").Obj()
				tj.Annotations = map[string]string{v1alpha1.AnnotationRuntimeHash: ""}
				return admissionRequest(t, admissionv1.Create, tj, false)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"set by trainyard only"},
		},
		"a queue name that is not a DNS subdomain": {
			req: func(t *testing.T) admission.Request {
				return admissionRequest(t, admissionv1.Create, tytesting.MakeTrainJob("train", ns).Queue("Not_A_Queue").Obj(), false)
			},
			wantCode: http.StatusForbidden,
			wantMsg:  []string{"kueue.x-k8s.io/queue-name"},
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
			c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
			w := &PinWebhook{Reader: c, Client: c}
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
	c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
	w := &PinWebhook{Reader: c, Client: c}
	tj := tytesting.MakeTrainJob("train", "").Obj()
	resp := w.Handle(context.Background(), admissionRequest(t, admissionv1.Create, tj, false))
	if !resp.Allowed {
		t.Fatalf("response refused: %+v", resp.Result)
	}
	if n := len(pinnedCopies(t, c, ns)); n != 1 {
		t.Errorf("got %d pinned copies in %s, want 1", n, ns)
	}
}

// TestWebhooksKeepTheUsersJSON: both webhooks patch only what they change.
// A GPU count the user wrote as a number stays a number; a patch of the
// whole object as Go marshals it stored it as "1", and Trainer's immutable
// spec.trainer then refused the next kubectl apply of the same manifest.
// Only a fraction, which the CRD refuses as written, is written as Go
// writes it (0.5 as "500m"), as Kueue's TrainJob webhook does.
func TestWebhooksKeepTheUsersJSON(t *testing.T) {
	const fractionPath = "/spec/trainer/resourcesPerNode/requests/cpu"
	// The request as the API server sends a manifest with numbers.
	asWritten := func(t *testing.T, tj *trainer.TrainJob) []byte {
		t.Helper()
		raw, err := json.Marshal(tj)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatal(err)
		}
		obj["spec"].(map[string]any)["trainer"] = map[string]any{"numNodes": 2, "resourcesPerNode": map[string]any{
			"limits": map[string]any{"nvidia.com/gpu": 1}, "requests": map[string]any{"cpu": 0.5, "memory": 1 << 30}}}
		if raw, err = json.Marshal(obj); err != nil {
			t.Fatal(err)
		}
		return raw
	}
	check := func(t *testing.T, req admission.Request, resp admission.Response) {
		t.Helper()
		if !resp.Allowed || len(resp.Patches) == 0 {
			t.Fatalf("allowed %v with %d patches, want an allowed patch: %+v", resp.Allowed, len(resp.Patches), resp.Result)
		}
		for _, op := range resp.Patches {
			if !strings.HasPrefix(op.Path, "/metadata/annotations") && op.Path != "/spec/suspend" && op.Path != fractionPath {
				t.Errorf("patch %s %s touches what the user wrote", op.Operation, op.Path)
			}
		}
		var obj struct {
			Spec struct {
				Trainer struct {
					ResourcesPerNode struct{ Limits, Requests map[string]any }
				}
			}
		}
		if err := json.Unmarshal(patchedRaw(t, req, resp), &obj); err != nil {
			t.Fatal(err)
		}
		perNode := obj.Spec.Trainer.ResourcesPerNode
		if perNode.Limits["nvidia.com/gpu"] != float64(1) || perNode.Requests["memory"] != float64(1<<30) || perNode.Requests["cpu"] != "500m" {
			t.Errorf("stored resourcesPerNode: limits %#v, requests %#v; want the integers as written and the fraction as 500m", perNode.Limits, perNode.Requests)
		}
	}

	t.Run("pin on create", func(t *testing.T) {
		c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
		w := &PinWebhook{Reader: c, Client: c}
		req := admissionRequest(t, admissionv1.Create, tytesting.MakeTrainJob("train", ns).Queue("q").Obj(), false)
		req.Object.Raw = asWritten(t, tytesting.MakeTrainJob("train", ns).Queue("q").Obj())
		check(t, req, w.Handle(context.Background(), req))
	})
	t.Run("keep pin on update", func(t *testing.T) {
		old := pinnedUpdateBase()
		tj := old.DeepCopy()
		delete(tj.Annotations, v1alpha1.AnnotationRuntimeHash)
		req := admissionRequest(t, admissionv1.Update, tj, false)
		req.Object.Raw = asWritten(t, tj)
		oldRaw, err := json.Marshal(old)
		if err != nil {
			t.Fatal(err)
		}
		req.OldObject = runtime.RawExtension{Raw: oldRaw}
		check(t, req, KeepPinWebhook{}.Handle(context.Background(), req))
	})
}

func TestFractions(t *testing.T) {
	cases := map[string]struct {
		raw  string
		want map[string]any // path: the value Go writes
	}{
		"integers and strings":        {raw: `{"a":{"cpu":2,"memory":"4Gi","n":[1,2]}}`},
		"a fraction":                  {raw: `{"a":{"cpu":0.5,"gpus":1}}`, want: map[string]any{"/a/cpu": "500m"}},
		"an exponent":                 {raw: `{"a":{"memory":1e3}}`, want: map[string]any{"/a/memory": "1k"}},
		"a key with a slash":          {raw: `{"a":{"nvidia.com/gpu":0.5}}`, want: map[string]any{"/a/nvidia.com~1gpu": "500m"}},
		"a fraction in a list's item": {raw: `{"l":[{"cpu":1},{"cpu":1.5}]}`, want: map[string]any{"/l/1/cpu": "1500m"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// typed is raw as Go's quantity type writes it.
			var doc any
			if err := json.Unmarshal([]byte(tc.raw), &doc); err != nil {
				t.Fatal(err)
			}
			typed, err := json.Marshal(asQuantities(t, doc))
			if err != nil {
				t.Fatal(err)
			}
			ops, err := fractions([]byte(tc.raw), typed)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]any{}
			for _, op := range ops {
				if op.Operation != "replace" {
					t.Errorf("op %s %s, want only replacements", op.Operation, op.Path)
				}
				got[op.Path] = op.Value
			}
			if len(got) == 0 {
				got = nil
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("fractions (-want +got):\n%s", diff)
			}
		})
	}
}

// asQuantities turns every number of doc into the string Go's quantity
// type writes for it.
func asQuantities(t *testing.T, doc any) any {
	switch v := doc.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = asQuantities(t, e)
		}
	case []any:
		for i, e := range v {
			v[i] = asQuantities(t, e)
		}
	case float64:
		q, err := resource.ParseQuantity(strconv.FormatFloat(v, 'f', -1, 64))
		if err != nil {
			t.Fatal(err)
		}
		return q.String()
	}
	return doc
}
