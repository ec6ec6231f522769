package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"
	"sigs.k8s.io/yaml"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestReapplyIsANoOp applies Trainer's example files as users and GitOps
// tools do, with kubectl itself: each file once, then again, then
// `kubectl diff`, then the same with server-side apply, from a first apply
// of either kind, and once more for a copy of the first example with its
// quantities written as numbers (unquotedQuantities). Only the namespace,
// the queue label and (for the server-side round) the names are set; the
// rest is as written. Every
// apply is accepted, no TrainJob's spec changes (its generation stays),
// the pin stays, runtimeRef names the runtime the manifest names, and diff
// finds nothing.
func TestReapplyIsANoOp(t *testing.T) {
	dir, err := kube.ModuleDir("github.com/kubeflow/trainer/v2")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "examples", "yaml", "*.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("Trainer's examples/yaml: %d files, %v; want its 5", len(files), err)
	}
	sort.Strings(files)
	files = append(files, unquotedQuantities(t, files[0]))
	csa, ssa := []string{"apply"}, []string{"apply", "--server-side"}
	for _, round := range []struct {
		name   string
		suffix string
		// applies are the manifest's applies in order, the first creating.
		applies [][]string
	}{
		{"client-side apply", "", [][]string{csa, csa, csa}},
		{"server-side apply", "-ssa", [][]string{ssa, ssa, ssa}},
		// Moving from client-side to server-side apply takes over the
		// fields client-side apply set, as kubectl documents.
		{"client-side then server-side", "-moved", [][]string{csa, append(ssa, "--force-conflicts"), ssa}},
	} {
		t.Run(round.name, func(t *testing.T) {
			for _, f := range files {
				t.Run(filepath.Base(f), func(t *testing.T) {
					g := gomega.NewWithT(t)
					manifest, jobs, suspends := tenantManifest(t, f, round.suffix)
					kubectl(t, append(round.applies[0], "-f", manifest)...)
					before := trainJobs(g, slices.Collect(maps.Keys(jobs)))
					for name, tj := range before {
						if tj.Spec.RuntimeRef.Name != jobs[name] || tj.Annotations[v1alpha1.AnnotationRuntimeHash] == "" {
							t.Errorf("%s: runtimeRef %q, pin %q; want the manifest's %q, pinned", name, tj.Spec.RuntimeRef.Name, tj.Annotations[v1alpha1.AnnotationRuntimeHash], jobs[name])
						}
					}
					for _, again := range round.applies[1:] {
						if suspends && slices.Contains(again, "--server-side") && !slices.Contains(again, "--force-conflicts") {
							// spec.suspend is Kueue's once it admits the
							// job: server-side apply calls a manifest that
							// sets it a conflict with Kueue, with or without
							// trainyard, until applied with force.
							again = append(slices.Clone(again), "--force-conflicts")
						}
						kubectl(t, append(again, "-f", manifest)...)
						if out, code := kubectlCode(t, "diff", "-f", manifest); code != 0 {
							t.Errorf("kubectl diff after %v: exit %d, want 0 (no difference):\n%s", again, code, out)
						}
						for name, tj := range trainJobs(g, slices.Collect(maps.Keys(jobs))) {
							was := before[name]
							// Kueue changes suspend and its own runtime patch;
							// what the user wrote and the pin stay.
							got, want := userFields(tj), userFields(was)
							if diff := cmp.Diff(want, got); diff != "" {
								t.Errorf("%s changed by %v (-before +after):\n%s", name, again, diff)
							}
						}
					}
					kubectl(t, "delete", "--wait=false", "-f", manifest)
				})
			}
		})
	}
}

// TestRuntimeAndJobsInOneApply creates a new TrainingRuntime and 50
// TrainJobs of it in one kubectl apply, as Trainer's multi-step example
// does with one: no admission step may refuse a job because it has not yet
// seen the runtime (or its pinned copy), and nothing here retries.
func TestRuntimeAndJobsInOneApply(t *testing.T) {
	g := gomega.NewWithT(t)
	dir, err := kube.ModuleDir("github.com/kubeflow/trainer/v2")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	objs, err := util.ReadManifests(filepath.Join(dir, "examples", "yaml", "05-multi-step.yaml"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	runtime, job := pick(t, objs, trainer.TrainingRuntimeKind), pick(t, objs, trainer.TrainJobKind)
	// A runtime no earlier test made, so its copy is made now.
	name := "one-apply-" + rand.String(6)
	runtime.SetName(name)
	runtime.SetNamespace(tenant)
	docs := []*unstructured.Unstructured{runtime}
	var names []string
	for i := range 50 {
		j := job.DeepCopy()
		j.SetName(fmt.Sprintf("%s-%02d", name, i))
		j.SetNamespace(tenant)
		j.SetLabels(map[string]string{kueueconstants.QueueLabel: queueOf("spoke1")})
		g.Expect(unstructured.SetNestedField(j.Object, name, "spec", "runtimeRef", "name")).To(gomega.Succeed())
		docs = append(docs, j)
		names = append(names, j.GetName())
	}
	manifest := writeManifest(t, docs)
	kubectl(t, "apply", "-f", manifest)
	got := trainJobs(g, names)
	g.Expect(got).To(gomega.HaveLen(50))
	for n, tj := range got {
		if tj.Annotations[v1alpha1.AnnotationRuntimeSource] != trainer.TrainingRuntimeKind+"/"+name {
			t.Errorf("%s: pinned from %q, want %s/%s", n, tj.Annotations[v1alpha1.AnnotationRuntimeSource], trainer.TrainingRuntimeKind, name)
		}
		if tj.Spec.RuntimeRef.Name != name {
			t.Errorf("%s: runtimeRef %q, want %q as written", n, tj.Spec.RuntimeRef.Name, name)
		}
		// Kueue's integration, run by the hub on the pinned copy, queues it.
		util.WorkloadOf(g, env.fleet.Hub.Client, tj)
	}
	kubectl(t, "delete", "--wait=false", "-f", manifest)
}

// unquotedQuantities writes the TrainJob of Trainer's example file as users
// often write one: the GPUs, CPUs and memory per node as YAML integers, not
// strings (Trainer's examples quote them). Go's types write such a number
// back as a string ("1"), so an admission step that returns the whole
// object as Go marshals it changes the stored spec.trainer, which Trainer
// makes immutable: the next kubectl apply of the same file sends the
// numbers again and is refused.
func unquotedQuantities(t *testing.T, file string) string {
	t.Helper()
	objs, err := util.ReadManifests(file)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != trainer.TrainJobKind {
			continue
		}
		o.SetName(o.GetName() + "-unquoted")
		perNode := map[string]any{
			"limits":   map[string]any{string(v1alpha1.GPUResource): int64(1)},
			"requests": map[string]any{"cpu": int64(2), "memory": int64(1 << 30)},
		}
		if err := unstructured.SetNestedField(o.Object, perNode, "spec", "trainer", "resourcesPerNode"); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, o)
	}
	if len(jobs) == 0 {
		t.Fatalf("no TrainJob in %s", file)
	}
	written := writeManifest(t, jobs)
	raw, err := os.ReadFile(written)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("nvidia.com/gpu: 1\n")) || !bytes.Contains(raw, []byte("cpu: 2\n")) {
		t.Fatalf("the manifest does not hold the quantities as numbers:\n%s", raw)
	}
	// Named after the example, for the subtest's name.
	p := filepath.Join(filepath.Dir(written), strings.TrimSuffix(filepath.Base(file), ".yaml")+"-unquoted-quantities.yaml")
	if err := os.Rename(written, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// userFields is what of a TrainJob the user wrote and pinning set.
func userFields(tj *trainer.TrainJob) map[string]any {
	var patches []trainer.RuntimePatch
	for _, p := range tj.Spec.RuntimePatches {
		if p.Manager != "kueue.x-k8s.io/manager" {
			patches = append(patches, p)
		}
	}
	return map[string]any{
		"runtimeRef": tj.Spec.RuntimeRef, "trainer": tj.Spec.Trainer, "initializer": tj.Spec.Initializer,
		"runtimePatches": patches, "labels": tj.Labels,
		"pin": []string{tj.Annotations[v1alpha1.AnnotationRuntimeSource], tj.Annotations[v1alpha1.AnnotationRuntimeHash]},
	}
}

// tenantManifest writes file's objects with TrainingRuntimes and TrainJobs
// in the tenant's namespace and the TrainJobs in spoke1's queue, their names
// ending in suffix, and returns its path, the TrainJobs' names with the
// runtime each names, and whether one sets spec.suspend.
func tenantManifest(t *testing.T, file, suffix string) (string, map[string]string, bool) {
	t.Helper()
	objs, err := util.ReadManifests(file)
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]string{}
	suspends := false
	for _, o := range objs {
		switch o.GetKind() {
		case trainer.TrainingRuntimeKind:
			o.SetNamespace(tenant)
		case trainer.TrainJobKind:
			o.SetNamespace(tenant)
			o.SetName(o.GetName() + suffix)
			labels := o.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			labels[kueueconstants.QueueLabel] = queueOf("spoke1")
			o.SetLabels(labels)
			jobs[o.GetName()], _, _ = unstructured.NestedString(o.Object, "spec", "runtimeRef", "name")
			if _, ok, _ := unstructured.NestedBool(o.Object, "spec", "suspend"); ok {
				suspends = true
			}
		}
	}
	return writeManifest(t, objs), jobs, suspends
}

func writeManifest(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	var b bytes.Buffer
	for _, o := range objs {
		raw, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(raw)
	}
	p := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func pick(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind {
			return o
		}
	}
	t.Fatalf("no %s in the example", kind)
	return nil
}

// trainJobs reads the tenant's TrainJobs of these names.
func trainJobs(g gomega.Gomega, names []string) map[string]*trainer.TrainJob {
	out := map[string]*trainer.TrainJob{}
	for _, n := range names {
		var tj trainer.TrainJob
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKey{Namespace: tenant, Name: n}, &tj)).To(gomega.Succeed())
		out[n] = &tj
	}
	return out
}

// kubectl runs the hub's kubectl as its administrator and fails the test
// on a non-zero exit.
func kubectl(t *testing.T, args ...string) {
	t.Helper()
	if out, code := kubectlCode(t, args...); code != 0 {
		t.Fatalf("kubectl %s: exit %d:\n%s", strings.Join(args, " "), code, out)
	}
}

func kubectlCode(t *testing.T, args ...string) (string, int) {
	t.Helper()
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	cmd := exec.Command(bin, append([]string{"--kubeconfig", env.fleet.Hub.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("run kubectl: %v", err)
	}
	return string(out), 0
}
