package kubework

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// PodPolicy is what a Kubernetes target lets tenants put in pod specs,
// through runtimes or runtime patches. The zero value is a default Target's:
// Pod Security baseline, none of the allowlisted fields (no tolerations,
// node selection, affinity or scheduling gates), any image.
type PodPolicy struct {
	Level   v1alpha1.PodSecurityLevel
	Allowed v1alpha1.AllowedPodFields
	// Images are the images the target runs (spec.images.allowed).
	Images backends.ImageRule
}

// PolicyOf is the pod policy of a Kubernetes target's spec.
func PolicyOf(s *v1alpha1.TargetSpec) PodPolicy {
	// A spoke runs every job in its images.
	var p PodPolicy
	if s.Images != nil {
		p.Images.Patterns = s.Images.Allowed
	}
	k := s.Kubernetes
	if k == nil {
		return p
	}
	p.Level = k.PodSecurity
	if k.AllowedPodFields != nil {
		p.Allowed = *k.AllowedPodFields
	}
	return p
}

// BoundGrace gives a pod that sets no terminationGracePeriodSeconds the
// grace p allows when that is less than the one Kubernetes would give it
// (30 s), so no pod of the Target outlives a stop by more than the cap.
func (p PodPolicy) BoundGrace(spec *corev1.PodSpec) {
	if most := p.Allowed.MaxTerminationGrace(); spec.TerminationGracePeriodSeconds == nil && most < corev1.DefaultTerminationGracePeriodSeconds {
		spec.TerminationGracePeriodSeconds = &most
	}
}

// StopWithin is how long the pods of work rendered under p may run on
// after their work is deleted: the longest grace p allows and
// backends.StopMargin. Pods made under an earlier, larger cap keep their
// grace; lowering the cap does not shorten their stop.
func (p PodPolicy) StopWithin() time.Duration {
	return time.Duration(p.Allowed.MaxTerminationGrace())*time.Second + backends.StopMargin
}

// Own names the Secrets and ConfigMaps made for one job (its companions):
// the only ones its pods may reference.
type Own struct {
	Secrets, ConfigMaps []string
}

// defaultVolumeTypes are the volume sources every tenant may use: those
// Pod Security restricted allows. Secret and ConfigMap volumes are further
// limited to the job's own companions.
var defaultVolumeTypes = []string{"configMap", "secret", "emptyDir", "persistentVolumeClaim", "projected",
	"downwardAPI", "ephemeral", "csi", "image"}

// kubeRootCA is the ConfigMap Kubernetes publishes in every namespace.
const kubeRootCA = "kube-root-ca.crt"

// Check returns why one pod template (of replicated job or role where) may
// not run under p; nil when it may. Fields the Target does not allow come
// first, each named with the value that set it; then the Pod Security
// level the tenant namespaces enforce, so a pod the spoke's admission
// would refuse (and leave its job waiting forever) is refused here.
func (p PodPolicy) Check(where string, meta *metav1.ObjectMeta, spec *corev1.PodSpec, own Own) error {
	var why []string
	why = append(why, p.checkPod(spec)...)
	why = append(why, p.checkScheduling(spec)...)
	why = append(why, p.checkVolumes(spec, own)...)
	for _, c := range allContainers(spec) {
		why = append(why, p.checkContainer(c, own)...)
	}
	if len(why) == 0 {
		why = p.checkPodSecurity(meta, spec)
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("pod template of %s: %s", where, strings.Join(why, "; "))
}

func (p PodPolicy) checkPod(spec *corev1.PodSpec) []string {
	a := p.Allowed
	var why []string
	for _, h := range []struct {
		name       string
		set, allow bool
	}{{"hostNetwork", spec.HostNetwork, a.HostNetwork}, {"hostPID", spec.HostPID, a.HostPID}, {"hostIPC", spec.HostIPC, a.HostIPC}} {
		if h.set && !h.allow {
			why = append(why, h.name+" is not allowed on this target")
		}
	}
	if g, most := spec.TerminationGracePeriodSeconds, a.MaxTerminationGrace(); g != nil && *g > most {
		why = append(why, fmt.Sprintf("terminationGracePeriodSeconds %d is more than this target allows (maxTerminationGracePeriodSeconds %d)", *g, most))
	}
	if c := spec.PriorityClassName; c != "" && !slices.Contains(a.PriorityClassNames, c) {
		why = append(why, fmt.Sprintf("priorityClassName %q is not allowed on this target (allowedPodFields.priorityClassNames)", c))
	}
	if spec.Priority != nil {
		why = append(why, "priority is set by the spoke from priorityClassName and may not be given")
	}
	if c := spec.RuntimeClassName; c != nil && !slices.Contains(a.RuntimeClassNames, *c) {
		why = append(why, fmt.Sprintf("runtimeClassName %q is not allowed on this target (allowedPodFields.runtimeClassNames)", *c))
	}
	if len(spec.ResourceClaims) > 0 {
		why = append(why, fmt.Sprintf("resourceClaims (%s) are not allowed: devices claimed through dynamic resource allocation are outside the quota the hub admitted",
			spec.ResourceClaims[0].Name))
	}
	for _, sa := range []string{spec.ServiceAccountName, spec.DeprecatedServiceAccount} {
		if sa != "" && sa != "default" && !slices.Contains(a.ServiceAccountNames, sa) {
			why = append(why, fmt.Sprintf("serviceAccountName %q is not allowed on this target", sa))
			break
		}
	}
	return why
}

func (p PodPolicy) checkVolumes(spec *corev1.PodSpec, own Own) []string {
	var why []string
	for _, s := range spec.ImagePullSecrets {
		if !slices.Contains(own.Secrets, s.Name) {
			why = append(why, fmt.Sprintf("imagePullSecrets: Secret %q was not made for this job", s.Name))
		}
	}
	for _, v := range spec.Volumes {
		typ := volumeType(&v.VolumeSource)
		if !slices.Contains(defaultVolumeTypes, typ) && !slices.Contains(p.Allowed.VolumeTypes, typ) {
			why = append(why, fmt.Sprintf("volume %q of type %s is not allowed on this target", v.Name, typ))
			continue
		}
		if s := v.Secret; s != nil && !slices.Contains(own.Secrets, s.SecretName) {
			why = append(why, fmt.Sprintf("volume %q mounts Secret %q, which was not made for this job", v.Name, s.SecretName))
		}
		if c := v.ConfigMap; c != nil && !ownConfigMap(own, c.Name) {
			why = append(why, fmt.Sprintf("volume %q mounts ConfigMap %q, which was not made for this job", v.Name, c.Name))
		}
		if pr := v.Projected; pr != nil {
			for _, src := range pr.Sources {
				if s := src.Secret; s != nil && !slices.Contains(own.Secrets, s.Name) {
					why = append(why, fmt.Sprintf("volume %q projects Secret %q, which was not made for this job", v.Name, s.Name))
				}
				if c := src.ConfigMap; c != nil && !ownConfigMap(own, c.Name) {
					why = append(why, fmt.Sprintf("volume %q projects ConfigMap %q, which was not made for this job", v.Name, c.Name))
				}
			}
		}
	}
	return why
}

func ownConfigMap(own Own, name string) bool {
	return name == kubeRootCA || slices.Contains(own.ConfigMaps, name)
}

// volumeType is the JSON name of the one source v sets ("" for none).
func volumeType(v *corev1.VolumeSource) string {
	for _, s := range []struct {
		name string
		set  bool
	}{
		{"configMap", v.ConfigMap != nil}, {"secret", v.Secret != nil}, {"emptyDir", v.EmptyDir != nil},
		{"persistentVolumeClaim", v.PersistentVolumeClaim != nil}, {"projected", v.Projected != nil},
		{"downwardAPI", v.DownwardAPI != nil}, {"ephemeral", v.Ephemeral != nil}, {"csi", v.CSI != nil},
		{"image", v.Image != nil}, {"hostPath", v.HostPath != nil}, {"nfs", v.NFS != nil}, {"iscsi", v.ISCSI != nil},
		{"fc", v.FC != nil}, {"cephfs", v.CephFS != nil}, {"rbd", v.RBD != nil}, {"glusterfs", v.Glusterfs != nil},
		{"flexVolume", v.FlexVolume != nil}, {"gitRepo", v.GitRepo != nil}, {"cinder", v.Cinder != nil},
		{"azureFile", v.AzureFile != nil}, {"azureDisk", v.AzureDisk != nil}, {"gcePersistentDisk", v.GCEPersistentDisk != nil},
		{"awsElasticBlockStore", v.AWSElasticBlockStore != nil}, {"vsphereVolume", v.VsphereVolume != nil},
		{"quobyte", v.Quobyte != nil}, {"flocker", v.Flocker != nil}, {"photonPersistentDisk", v.PhotonPersistentDisk != nil},
		{"portworxVolume", v.PortworxVolume != nil}, {"scaleIO", v.ScaleIO != nil}, {"storageos", v.StorageOS != nil},
	} {
		if s.set {
			return s.name
		}
	}
	return "unknown"
}

func (p PodPolicy) checkContainer(c *corev1.Container, own Own) []string {
	a := p.Allowed
	var why []string
	if err := p.Images.Check(c.Image); err != nil {
		why = append(why, fmt.Sprintf("container %q: %v", c.Name, err))
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.Privileged != nil && *sc.Privileged && !a.Privileged {
			why = append(why, fmt.Sprintf("container %q: privileged is not allowed on this target", c.Name))
		}
		if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation && !a.AllowPrivilegeEscalation {
			why = append(why, fmt.Sprintf("container %q: allowPrivilegeEscalation is not allowed on this target", c.Name))
		}
		if sc.Capabilities != nil {
			for _, cp := range sc.Capabilities.Add {
				name := strings.TrimPrefix(strings.ToUpper(string(cp)), "CAP_")
				if !slices.Contains(a.Capabilities, name) {
					why = append(why, fmt.Sprintf("container %q: capability %s is not allowed on this target", c.Name, cp))
				}
			}
		}
	}
	for _, e := range c.Env {
		if f := e.ValueFrom; f != nil && f.SecretKeyRef != nil && !slices.Contains(own.Secrets, f.SecretKeyRef.Name) {
			why = append(why, fmt.Sprintf("container %q: env %s reads Secret %q, which was not made for this job", c.Name, e.Name, f.SecretKeyRef.Name))
		}
		if f := e.ValueFrom; f != nil && f.ConfigMapKeyRef != nil && !ownConfigMap(own, f.ConfigMapKeyRef.Name) {
			why = append(why, fmt.Sprintf("container %q: env %s reads ConfigMap %q, which was not made for this job", c.Name, e.Name, f.ConfigMapKeyRef.Name))
		}
	}
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil && !slices.Contains(own.Secrets, e.SecretRef.Name) {
			why = append(why, fmt.Sprintf("container %q: envFrom reads Secret %q, which was not made for this job", c.Name, e.SecretRef.Name))
		}
		if e.ConfigMapRef != nil && !ownConfigMap(own, e.ConfigMapRef.Name) {
			why = append(why, fmt.Sprintf("container %q: envFrom reads ConfigMap %q, which was not made for this job", c.Name, e.ConfigMapRef.Name))
		}
	}
	return why
}

// allContainers are spec's init, regular and ephemeral containers.
func allContainers(spec *corev1.PodSpec) []*corev1.Container {
	out := make([]*corev1.Container, 0, len(spec.InitContainers)+len(spec.Containers)+len(spec.EphemeralContainers))
	for i := range spec.InitContainers {
		out = append(out, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		out = append(out, &spec.Containers[i])
	}
	for i := range spec.EphemeralContainers {
		out = append(out, (*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	return out
}

var (
	evaluatorOnce sync.Once
	evaluator     psapolicy.Evaluator
	errEvaluator  error
)

// checkPodSecurity evaluates the pod as the spoke's Pod Security admission
// will, at the latest version of the Target's level.
func (p PodPolicy) checkPodSecurity(meta *metav1.ObjectMeta, spec *corev1.PodSpec) []string {
	level := psaapi.Level(PodSecurityLabel(p.Level))
	if level == psaapi.LevelPrivileged {
		return nil
	}
	evaluatorOnce.Do(func() { evaluator, errEvaluator = psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil) })
	if errEvaluator != nil {
		return []string{fmt.Sprintf("cannot evaluate Pod Security: %v", errEvaluator)}
	}
	if meta == nil {
		meta = &metav1.ObjectMeta{}
	}
	res := psapolicy.AggregateCheckResults(evaluator.EvaluatePod(psaapi.LevelVersion{Level: level, Version: psaapi.LatestVersion()}, meta, spec))
	if res.Allowed {
		return nil
	}
	return []string{fmt.Sprintf("violates Pod Security %q: %s (%s)", level, res.ForbiddenReason(), res.ForbiddenDetail())}
}
