package jobset

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func replicatedJob(t *testing.T, js *jobsetv1alpha2.JobSet, name string) *jobsetv1alpha2.ReplicatedJob {
	t.Helper()
	for i := range js.Spec.ReplicatedJobs {
		if js.Spec.ReplicatedJobs[i].Name == name {
			return &js.Spec.ReplicatedJobs[i]
		}
	}
	t.Fatalf("no replicated job %q", name)
	return nil
}

func mounts(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		out[m.Name] = m.MountPath
	}
	return out
}

func TestRenderMPI(t *testing.T) {
	cases := map[string]struct {
		numNodes, procs int32
		launcherAsNode  bool
		// wantHosts are the hostfile's replicated job and index per line.
		wantHosts []string
		wantNodes int32
	}{
		"two nodes, two procs each":   {numNodes: 2, procs: 2, wantHosts: []string{"node-0-0", "node-0-1"}, wantNodes: 2},
		"three nodes, one proc each":  {numNodes: 3, procs: 1, wantHosts: []string{"node-0-0", "node-0-1", "node-0-2"}, wantNodes: 3},
		"launcher runs as a node too": {numNodes: 3, procs: 4, launcherAsNode: true, wantHosts: []string{"launcher-0-0", "node-0-0", "node-0-1"}, wantNodes: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := tytesting.MPIDispatch(tc.numNodes, tc.procs, tc.launcherAsNode).Obj()
			r, err := RenderAll(d, RenderOptions{Namespace: testNS})
			if err != nil {
				t.Fatalf("RenderAll: %v", err)
			}
			js := r.JobSet
			if got := ptr.Deref(replicatedJob(t, js, "node").Template.Spec.Parallelism, 0); got != tc.wantNodes {
				t.Errorf("node pods = %d, want %d", got, tc.wantNodes)
			}
			launcher := replicatedJob(t, js, "launcher").Template.Spec.Template.Spec.Containers[0]
			if m := mounts(launcher); m["mpi-hostfile"] != "/etc/mpi" || m["mpi-ssh-auth"] != "/home/mpiuser/.ssh" {
				t.Errorf("launcher mounts = %v, want the hostfile at /etc/mpi and the keys at the runtime's sshAuthMountPath", m)
			}
			if m := mounts(replicatedJob(t, js, "node").Template.Spec.Template.Spec.Containers[0]); m["mpi-ssh-auth"] != "/home/mpiuser/.ssh" || m["mpi-hostfile"] != "" {
				t.Errorf("node mounts = %v, want only the keys", m)
			}
			for k, want := range map[string]string{
				"OMPI_MCA_orte_default_hostfile":  "/etc/mpi/hostfile",
				"OMPI_MCA_orte_set_default_slots": fmt.Sprint(tc.procs),
			} {
				if got := envOf(launcher, k); got != want {
					t.Errorf("launcher %s = %q, want %q", k, got, want)
				}
			}

			var hostfile *corev1.ConfigMap
			var keys *corev1.Secret
			for _, o := range r.Companions {
				if o.GetNamespace() != testNS || o.GetLabels()[v1alpha1.LabelDispatchName] != d.Name || len(o.GetOwnerReferences()) != 0 {
					t.Errorf("%T %s: namespace %q labels %v owners %v; want the JobSet's namespace and labels, no owner yet",
						o, o.GetName(), o.GetNamespace(), o.GetLabels(), o.GetOwnerReferences())
				}
				switch c := o.(type) {
				case *corev1.ConfigMap:
					hostfile = c
				case *corev1.Secret:
					keys = c
				}
			}
			if hostfile == nil || keys == nil {
				t.Fatalf("companions = %v, want a hostfile ConfigMap and a key Secret", r.Companions)
			}
			var want strings.Builder
			for _, h := range tc.wantHosts {
				fmt.Fprintf(&want, "%s-%s.%s slots=%d\n", js.Name, h, js.Name, tc.procs)
			}
			if got := hostfile.Data["hostfile"]; got != want.String() {
				t.Errorf("hostfile =\n%s\nwant\n%s", got, want.String())
			}
			if hostfile.Name != js.Name+"-mpi-hostfile" || keys.Name != js.Name+"-mpi-ssh-auth" {
				t.Errorf("companion names %s, %s do not match the JobSet's volumes", hostfile.Name, keys.Name)
			}
			block, _ := pem.Decode(keys.Data[corev1.SSHAuthPrivateKey])
			if keys.Type != corev1.SecretTypeSSHAuth || block == nil || !strings.HasPrefix(string(keys.Data["ssh-publickey"]), "ecdsa-sha2-") {
				t.Fatalf("key Secret of type %s holds no PEM private key and ssh public key", keys.Type)
			}
			if _, err := x509.ParseECPrivateKey(block.Bytes); err != nil {
				t.Errorf("private key: %v", err)
			}
		})
	}
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return "<unset>"
}

// TestSubmitMPIKeepsItsKeys: Submit creates the JobSet, then its Secret and
// ConfigMap owned by it; a repeated Submit keeps the key pair, and one after
// a crash that lost the Secret makes it again.
func TestSubmitMPIKeepsItsKeys(t *testing.T) {
	ctx, c := context.Background(), newFakeClient()
	d := tytesting.MPIDispatch(2, 2, false).Obj()
	name := backends.RemoteName(d)
	secretKey := client.ObjectKey{Namespace: testNS, Name: name + "-mpi-ssh-auth"}
	readKey := func() []byte {
		t.Helper()
		var s corev1.Secret
		if err := c.Get(ctx, secretKey, &s); err != nil {
			t.Fatalf("key Secret: %v", err)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "JobSet" || s.OwnerReferences[0].Name != name {
			t.Fatalf("key Secret owners = %v, want the JobSet", s.OwnerReferences)
		}
		return s.Data[corev1.SSHAuthPrivateKey]
	}
	if _, err := New(c, Options{Namespace: testPrefix}).Submit(ctx, d); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	first := readKey()
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: name + "-mpi-hostfile"}, &cm); err != nil || len(cm.OwnerReferences) != 1 {
		t.Fatalf("hostfile ConfigMap = %v owners %v; want one owned by the JobSet", err, cm.OwnerReferences)
	}
	if _, err := New(c, Options{Namespace: testPrefix}).Submit(ctx, d); err != nil {
		t.Fatalf("second Submit: %v", err)
	}
	if string(readKey()) != string(first) {
		t.Error("a repeated Submit replaced the key pair the pods already mount")
	}
	if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: secretKey.Name}}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(c, Options{Namespace: testPrefix}).Submit(ctx, d); err != nil {
		t.Fatalf("Submit after a lost Secret: %v", err)
	}
	if len(readKey()) == 0 {
		t.Error("the lost Secret was not made again")
	}
	if got := jobSetNames(t, c); len(got) != 1 {
		t.Errorf("JobSets = %v, want one", got)
	}
}
