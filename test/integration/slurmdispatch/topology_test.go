package slurmdispatch

import (
	"context"
	"slices"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestRequiredSwitchKeepsJobInOneSwitch: a 2-node job whose runtime
// requires one leaf switch gets an assignment inside one switch of the
// published topology.conf, and Slurm runs it on exactly those nodes.
func TestRequiredSwitchKeepsJobInOneSwitch(t *testing.T) {
	g := NewWithT(t)
	rt := tytesting.MakeClusterTrainingRuntime("switch-slurm").Spec(tytesting.TorchRuntimeSpec(1)).
		PodAnnotation(v1alpha1.AnnotationPodSetRequiredTopology, slurm.SwitchLevel).Obj()
	ctx := context.Background()
	g.Expect(env.fleet.Hub.Client.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = env.fleet.Hub.Client.Delete(ctx, rt) })
	tj := submit(t, trainJob("in-switch", "switch-slurm", 2, 2, "true"))
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))

	ta := d.Spec.PodSets[0].Topology
	g.Expect(ta).NotTo(BeNil(), "no topology assignment on the Dispatch")
	g.Expect(ta.Levels).To(Equal([]string{slurm.UpperSwitchLevel(1), slurm.SwitchLevel, slurm.HostnameLevel}))
	switches := map[string]bool{}
	var assigned []string
	for _, dom := range ta.Domains {
		switches[dom.Values[1]] = true
		assigned = append(assigned, dom.Values[2])
	}
	g.Expect(switches).To(HaveLen(1), "assignment spans switches: %+v", ta.Domains)
	id, _ := strconv.Atoi(d.Status.Remote.ID)
	j, err := serviceClient().Job(ctx, int32(id))
	g.Expect(err).NotTo(HaveOccurred())
	ran, err := slurm.ExpandHostlist(j.Nodes)
	g.Expect(err).NotTo(HaveOccurred())
	slices.Sort(assigned)
	g.Expect(ran).To(Equal(assigned))
}
