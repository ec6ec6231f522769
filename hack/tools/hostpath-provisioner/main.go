// Command hostpath-provisioner is the storage provisioner of the harness's
// spoke clusters: a dynamic provisioner built on sig-storage's
// external-provisioner library that answers claims of its StorageClasses
// with hostPath PersistentVolumes, one folder per volume under --root.
// kube-controller-manager's PV controller binds the claims to the volumes.
//
// Every simulated (kwok) node of a spoke lives on the machine that runs this
// process, so a volume is reachable from all of them and carries no node
// affinity. Volumes of a class whose reclaimPolicy is Delete lose their
// folder when released.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v11/controller"
)

// rootAnnotation names the folder a volume was made under, so Delete
// removes only what this provisioner made.
const rootAnnotation = "hostpath.trainyard.dev/root"

type hostPath struct{ root string }

func (h *hostPath) Provision(_ context.Context, o controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	if o.PVC.Spec.Selector != nil {
		return nil, controller.ProvisioningFinished, errors.New("claims with a selector are not supported")
	}
	if o.PVC.Spec.VolumeMode != nil && *o.PVC.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		return nil, controller.ProvisioningFinished, errors.New("block volumes are not supported")
	}
	dir := filepath.Join(h.root, o.PVName)
	// World-writable like a fresh disk's root: pods of any user write there.
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, controller.ProvisioningInBackground, err
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, controller.ProvisioningInBackground, err
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if o.StorageClass.ReclaimPolicy != nil {
		reclaim = *o.StorageClass.ReclaimPolicy
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: o.PVName, Annotations: map[string]string{rootAnnotation: h.root}},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   o.PVC.Spec.AccessModes,
			VolumeMode:                    o.PVC.Spec.VolumeMode,
			MountOptions:                  o.StorageClass.MountOptions,
			Capacity: corev1.ResourceList{
				corev1.ResourceStorage: o.PVC.Spec.Resources.Requests[corev1.ResourceStorage],
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr(corev1.HostPathDirectoryOrCreate)},
			},
		},
	}
	return pv, controller.ProvisioningFinished, nil
}

func (h *hostPath) Delete(_ context.Context, pv *corev1.PersistentVolume) error {
	if pv.Annotations[rootAnnotation] != h.root || pv.Spec.HostPath == nil {
		return &controller.IgnoredError{Reason: "not made by this provisioner"}
	}
	dir := filepath.Clean(pv.Spec.HostPath.Path)
	if filepath.Dir(dir) != h.root || !strings.HasPrefix(filepath.Base(dir), "pvc-") {
		return &controller.IgnoredError{Reason: fmt.Sprintf("path %s is not a volume folder under %s", dir, h.root)}
	}
	return os.RemoveAll(dir)
}

func ptr[T any](v T) *T { return &v }

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster to serve")
	name := flag.String("provisioner-name", "trainyard.dev/hostpath", "provisioner name StorageClasses refer to")
	root := flag.String("root", "", "folder that holds one folder per volume")
	flag.Parse()
	if err := run(*kubeconfig, *name, *root); err != nil {
		klog.ErrorS(err, "hostpath-provisioner")
		os.Exit(1)
	}
}

func run(kubeconfig, name, root string) error {
	if root == "" || !filepath.IsAbs(root) {
		return errors.New("--root must be an absolute path")
	}
	root = filepath.Clean(root)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pc := controller.NewProvisionController(ctx, cs, name, &hostPath{root: root},
		controller.LeaderElection(false),
		// Errors are retried soon: a test waits on the claim, not on back-off.
		controller.ExponentialBackOffOnError(false),
	)
	klog.InfoS("serving claims", "provisioner", name, "root", root)
	pc.Run(ctx)
	return nil
}
