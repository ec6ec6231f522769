package snapshot

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// patchResponse answers an admission request for raw with a patch of what
// the webhook changed, before to after, and no more. Both sides went
// through Go types, so neither carries what that round trip changes in the
// user's own JSON: a GPU count written as 1 comes back as "1". A patch
// taken against raw would store such changes, and Trainer's immutable
// spec.trainer would then refuse the next kubectl apply of the same
// manifest. Only fractional numbers (cpu: 0.5) are written as Go writes
// them ("500m"), as Kueue's TrainJob webhook did before trainyard took its
// place: the CRD takes a quantity as an integer or a string, never as a
// fraction, so as written the job could not be created.
func patchResponse(raw []byte, before, after *trainer.TrainJob) admission.Response {
	b, err := json.Marshal(before)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	a, err := json.Marshal(after)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	ops, err := fractions(raw, b)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	changed, err := jsonpatch.CreatePatch(b, a)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if ops = append(ops, changed...); len(ops) == 0 {
		return admission.Allowed("")
	}
	resp := admission.Patched("", ops...)
	resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
	return resp
}

// fractions are the replacements of raw's fractional numbers by what typed
// (raw through Go types) has in their place.
func fractions(raw, typed []byte) ([]jsonpatch.Operation, error) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if !hasFraction(doc) {
		return nil, nil
	}
	all, err := jsonpatch.CreatePatch(raw, typed)
	if err != nil {
		return nil, err
	}
	var ops []jsonpatch.Operation
	for _, op := range all {
		if op.Operation == "replace" && isFraction(pointerValue(doc, op.Path)) {
			ops = append(ops, op)
		}
	}
	return ops, nil
}

func isFraction(v any) bool {
	n, ok := v.(json.Number)
	return ok && strings.ContainsAny(string(n), ".eE")
}

func hasFraction(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			if hasFraction(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasFraction(e) {
				return true
			}
		}
	}
	return isFraction(v)
}

// pointerValue is the value at JSON pointer path in doc, nil if none.
func pointerValue(doc any, path string) any {
	if path == "" {
		return doc
	}
	for _, token := range strings.Split(path, "/")[1:] {
		token = strings.NewReplacer("~1", "/", "~0", "~").Replace(token)
		switch v := doc.(type) {
		case map[string]any:
			doc = v[token]
		case []any:
			i, err := strconv.Atoi(token)
			if err != nil || i < 0 || i >= len(v) {
				return nil
			}
			doc = v[i]
		default:
			return nil
		}
	}
	return doc
}
