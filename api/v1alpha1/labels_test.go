package v1alpha1

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestLabelValue(t *testing.T) {
	name63 := "a" + strings.Repeat("b", 61) + "c"
	// Kueue names a TrainJob's Workload "trainjob-<name>-<5 hex>".
	workload78 := "trainjob-" + name63 + "-1a2b3"
	cases := map[string]struct {
		in   string
		kept bool // the value is the input itself
	}{
		"short name":                     {in: "trainjob-bert-1a2b3", kept: true},
		"63-character namespace":         {in: name63, kept: true},
		"empty":                          {in: "", kept: true},
		"Workload of a 63-character job": {in: workload78},
		"253-character DNS subdomain":    {in: strings.Repeat("abcdefghi.", 25) + "abc"},
		"64 characters":                  {in: name63 + "d"},
		"ends in a dot once cut":         {in: strings.Repeat("a", 51) + "." + strings.Repeat("b", 20)},
		"characters labels refuse":       {in: "team/a:b"},
		"nothing kept but the hash":      {in: "////"},
	}
	seen := map[string]string{}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := LabelValue(tc.in)
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
				t.Fatalf("LabelValue(%q) = %q, not a label value: %v", tc.in, got, errs)
			}
			if (got == tc.in) != tc.kept {
				t.Errorf("LabelValue(%q) = %q; want the input kept: %v", tc.in, got, tc.kept)
			}
			if again := LabelValue(tc.in); again != got {
				t.Errorf("LabelValue(%q) is not stable: %q then %q", tc.in, got, again)
			}
		})
		if other, dup := seen[LabelValue(tc.in)]; dup {
			t.Errorf("%q and %q share the label value %q", tc.in, other, LabelValue(tc.in))
		}
		seen[LabelValue(tc.in)] = tc.in
	}
	// Values that share a long prefix still differ by their hash.
	if a, b := LabelValue(workload78), LabelValue("trainjob-"+name63+"-9f8e7"); a == b {
		t.Errorf("two Workloads of one 63-character name share the label value %q", a)
	}
	if got := LabelValue(workload78); !strings.HasPrefix(got, "trainjob-abbb") {
		t.Errorf("LabelValue(%q) = %q: want the start of the name kept for people reading it", workload78, got)
	}
}

func TestWithoutTrainyardBookkeeping(t *testing.T) {
	cases := map[string]struct {
		annotations map[string]string
		finalizers  []string
		wantAnn     map[string]string
		wantFin     []string
	}{
		"none of trainyard's": {
			annotations: map[string]string{"a": "1"}, finalizers: []string{"kueue.x-k8s.io/resource-in-use"},
			wantAnn: map[string]string{"a": "1"}, wantFin: []string{"kueue.x-k8s.io/resource-in-use"},
		},
		"attempt and finalizer left out, the rest kept in order": {
			annotations: map[string]string{AnnotationAttempt: "3", "a": "1"},
			finalizers:  []string{"x", WorkloadFinalizer, "y"},
			wantAnn:     map[string]string{"a": "1"}, wantFin: []string{"x", "y"},
		},
		"only trainyard's": {
			annotations: map[string]string{AnnotationAttempt: "1"}, finalizers: []string{WorkloadFinalizer},
			wantAnn: map[string]string{}, wantFin: []string{},
		},
		"nil": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ann, fin := maps.Clone(tc.annotations), slices.Clone(tc.finalizers)
			gotAnn, gotFin := WithoutTrainyardBookkeeping(ann, fin)
			if !maps.Equal(gotAnn, tc.wantAnn) || !slices.Equal(gotFin, tc.wantFin) {
				t.Errorf("got %v %v, want %v %v", gotAnn, gotFin, tc.wantAnn, tc.wantFin)
			}
			if !maps.Equal(ann, tc.annotations) || !slices.Equal(fin, tc.finalizers) {
				t.Errorf("arguments changed: %v %v, were %v %v", ann, fin, tc.annotations, tc.finalizers)
			}
		})
	}
}
