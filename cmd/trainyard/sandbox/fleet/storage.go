package fleet

import (
	"context"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// StorageClassName is the default StorageClass of a cluster started
	// with Options.Storage: claims that name no class get it.
	StorageClassName = "standard"
	// HostPathProvisioner is the provisioner name the harness's
	// hostpath-provisioner (hack/tools/hostpath-provisioner) serves.
	HostPathProvisioner = "trainyard.dev/hostpath"
)

// startStorage runs hostpath-provisioner, which provisions hostPath
// volumes under Dir/volumes for claims of the default StorageClass it
// creates; kube-controller-manager's PV controller binds them. The class
// binds WaitForFirstConsumer, as clusters with node-local disks do: the
// scheduler picks the pod's node first, then the volume is made.
func (c *Cluster) startStorage(ctx context.Context) error {
	root, err := filepath.Abs(filepath.Join(c.Dir, "volumes"))
	if err != nil {
		return err
	}
	p, err := c.run("hostpath-provisioner", "hostpath-provisioner",
		"--kubeconfig="+c.Kubeconfig, "--provisioner-name="+HostPathProvisioner, "--root="+root)
	if err != nil {
		return err
	}
	if err := settle(ctx, p); err != nil {
		return err
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	binding := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       HostPathProvisioner,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &binding,
	}
	if err := c.Client.Create(ctx, sc); err != nil && !isAlreadyExists(err) {
		return fmt.Errorf("create StorageClass %s: %w", sc.Name, err)
	}
	return nil
}
