package convert

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
)

// lastApplied is kubectl's bookkeeping annotation; it describes the old
// object and is dropped.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// serverSet are input paths the API server writes; they are dropped with one
// warning.
var serverSet = []string{
	"status", "metadata.uid", "metadata.resourceVersion", "metadata.generation",
	"metadata.creationTimestamp", "metadata.managedFields", "metadata.selfLink",
}

// hints say where a field that is not carried over belongs, by its name.
var hints = map[string]string{
	"minReplicas":             "a TrainJob runs a fixed numNodes",
	"maxReplicas":             "a TrainJob runs a fixed numNodes",
	"metrics":                 "TrainJobs are not autoscaled",
	"rdzvBackend":             "the runtime's torch policy sets up the rendezvous",
	"rdzvHost":                "the runtime's torch policy sets up the rendezvous",
	"rdzvPort":                "the runtime's torch policy sets up the rendezvous",
	"rdzvId":                  "the runtime's torch policy sets up the rendezvous",
	"rdzvConf":                "the runtime's torch policy sets up the rendezvous",
	"standalone":              "the runtime's torch policy sets up the rendezvous",
	"maxRestarts":             "set failurePolicy.maxRestarts in the runtime",
	"sshAuthMountPath":        "set mlPolicy.mpi.sshAuthMountPath in the runtime",
	"launcherCreationPolicy":  "the runtime decides when the launcher starts (dependsOn)",
	"backoffLimit":            "set failurePolicy.maxRestarts in the runtime",
	"cleanPodPolicy":          "the runtime and trainyard decide when pods go",
	"ttlSecondsAfterFinished": "the runtime and trainyard decide when pods go",
	"schedulingPolicy":        "Kueue schedules TrainJobs: use the kueue.x-k8s.io/queue-name and kueue.x-k8s.io/priority-class labels",
	"managedBy":               "trainyard dispatches TrainJobs admitted by Kueue",
	"volumes":                 "mount volumes through the runtime's pod template",
	"volumeMounts":            "mount volumes through the runtime's pod template",
	"ports":                   "the runtime sets the ports",
	"envFrom":                 "list the variables in env instead, or set envFrom in the runtime",
	"initContainers":          "add init containers to the runtime",
}

// warnUnread names every non-empty field of the input that the conversion
// did not read, comparing the input with what the local types decoded.
func (c *conversion) warnUnread(doc []byte) error {
	var in any
	if err := json.Unmarshal(doc, &in); err != nil {
		return err
	}
	b, err := json.Marshal(c.job)
	if err != nil {
		return err
	}
	var read any
	if err := json.Unmarshal(b, &read); err != nil {
		return err
	}
	var paths, server []string
	unreadFields(in, read, "", &paths)
	for _, p := range paths {
		switch {
		case c.isSkipped(p):
		case slices.Contains(serverSet, p):
			server = append(server, p)
		default:
			c.warnf("%s is not carried over%s", p, hintFor(p))
		}
	}
	if _, ok := c.job.Metadata.Annotations[lastApplied]; ok {
		server = append(server, "metadata.annotations."+lastApplied)
	}
	if len(server) > 0 {
		c.warnf("%s are not carried over (written by the API server or kubectl)", strings.Join(server, ", "))
	}
	return nil
}

func (c *conversion) isSkipped(path string) bool {
	for p := range c.skipped {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return false
}

func hintFor(path string) string {
	key := path[strings.LastIndex(path, ".")+1:]
	if i := strings.Index(key, "["); i >= 0 {
		key = key[:i]
	}
	if h, ok := hints[key]; ok {
		return ": " + h
	}
	if strings.Contains(path, ".template.") {
		return ": set it in the runtime"
	}
	return ""
}

// unreadFields appends the paths of non-empty values of in that read lacks.
// Maps are keyed by field name; list items by their "name" when they have
// one, else by index.
func unreadFields(in, read any, path string, out *[]string) {
	switch v := in.(type) {
	case map[string]any:
		r, _ := read.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(v)) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			rv, ok := r[k]
			if !ok {
				if !isEmpty(v[k]) {
					*out = append(*out, p)
				}
				continue
			}
			unreadFields(v[k], rv, p, out)
		}
	case []any:
		r, _ := read.([]any)
		for i, item := range v {
			p := fmt.Sprintf("%s[%s]", path, itemKey(item, i))
			if i >= len(r) {
				if !isEmpty(item) {
					*out = append(*out, p)
				}
				continue
			}
			unreadFields(item, r[i], p, out)
		}
	}
}

func itemKey(item any, i int) string {
	if m, ok := item.(map[string]any); ok {
		if n, ok := m["name"].(string); ok && n != "" {
			return n
		}
	}
	return fmt.Sprint(i)
}

// isEmpty: null, or maps and lists of nothing but empty values; dropping
// them loses nothing.
func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		for _, x := range v {
			if !isEmpty(x) {
				return false
			}
		}
		return true
	case []any:
		for _, x := range v {
			if !isEmpty(x) {
				return false
			}
		}
		return true
	}
	return false
}

// compareContainers warns about fields of the Master's training container
// that differ from the Worker's: every TrainJob node runs the same one.
func (c *conversion) compareContainers(replica string, got, kept *v1Container) {
	var diff []string
	if ptr.Deref(got.Image, "") != ptr.Deref(kept.Image, "") {
		diff = append(diff, "image")
	}
	if !slices.Equal(got.Command, kept.Command) {
		diff = append(diff, "command")
	}
	if !slices.Equal(got.Args, kept.Args) {
		diff = append(diff, "args")
	}
	if !equality.Semantic.DeepEqual(got.Env, kept.Env) {
		diff = append(diff, "env")
	}
	if !equality.Semantic.DeepEqual(ptr.Deref(got.Resources, corev1.ResourceRequirements{}), ptr.Deref(kept.Resources, corev1.ResourceRequirements{})) {
		diff = append(diff, "resources")
	}
	if len(diff) > 0 {
		c.warnf("the %s's training container differs from the %s's in %s, which is not carried over: every node runs the %s's container",
			replica, replicaWorker, strings.Join(diff, ", "), replicaWorker)
	}
}

// mergeEnv returns first's variables, then those of second that first
// lacks; a variable both set differently keeps first's value, with a warning.
func (c *conversion) mergeEnv(first, second []corev1.EnvVar) []corev1.EnvVar {
	out := slices.Clone(first)
	for _, e := range second {
		i := slices.IndexFunc(out, func(o corev1.EnvVar) bool { return o.Name == e.Name })
		switch {
		case i < 0:
			out = append(out, e)
		case !equality.Semantic.DeepEqual(out[i], e):
			c.warnf("env %s differs between the %s and the %s: the %s's value is kept", e.Name, replicaWorker, replicaLauncher, replicaWorker)
		}
	}
	return out
}
