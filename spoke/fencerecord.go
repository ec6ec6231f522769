package spoke

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FenceRecord keeps, in a ConfigMap where the agent's replicas elect their
// leader, the attempts whose work any replica's fence stopped. Each replica
// remembers its own stops in memory, but a standby's evidence of the lease
// may trail the leader's (it just started, or its reads failed), so it may
// fence first, and the leader would then find the work gone and report it
// lost. The record lives on the cluster the replicas share, which stays in
// reach when the hub is cut off, so the leader reads a standby's stop as a
// stop. Nil: no record (replicas that elect on the hub share nothing the
// cut leaves in reach; they fall back on the lapse window of MayHaveFenced).
type FenceRecord struct {
	Client    client.Client
	Namespace string
	Name      string
}

// FenceRecordName names a target's record.
func FenceRecordName(target string) string { return "trainyard-agent-" + target + "-fenced" }

// recordKey is a ConfigMap data key: namespace, name and attempt, joined
// by dots (none may hold one in a name of the agent namespace's Dispatches:
// Dispatch names are DNS labels).
func recordKey(k fencedKey) string { return fmt.Sprintf("%s.%s.%d", k.namespace, k.name, k.attempt) }

// Add records that k's work is being stopped, before it is.
func (r *FenceRecord) Add(ctx context.Context, k fencedKey, at time.Time) error {
	if r == nil {
		return nil
	}
	return r.patch(ctx, map[string]any{recordKey(k): at.UTC().Format(time.RFC3339)}, true)
}

// Has reports whether some replica recorded stopping k's work.
func (r *FenceRecord) Has(ctx context.Context, k fencedKey) (bool, error) {
	if r == nil {
		return false, nil
	}
	var cm corev1.ConfigMap
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, &cm)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, ok := cm.Data[recordKey(k)]
	return ok, nil
}

// Remove forgets k once its stop is reported or no report is due.
func (r *FenceRecord) Remove(ctx context.Context, k fencedKey) error {
	if r == nil {
		return nil
	}
	return client.IgnoreNotFound(r.patch(ctx, map[string]any{recordKey(k): nil}, false))
}

// patch merges data into the record, creating it first when create says so.
func (r *FenceRecord) patch(ctx context.Context, data map[string]any, create bool) error {
	body, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name}}
	err = r.Client.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", body))
	if !create || !apierrors.IsNotFound(err) {
		return err
	}
	cm.Data = map[string]string{}
	for k, v := range data {
		if s, ok := v.(string); ok {
			cm.Data[k] = s
		}
	}
	if err := r.Client.Create(ctx, cm); !apierrors.IsAlreadyExists(err) {
		return err
	}
	return r.Client.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", body))
}
