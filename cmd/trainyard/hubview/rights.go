package hubview

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Tenant roles the hub chart ships (config/rbac/tenant): what `jobs`,
// `describe` and `logs` need in a namespace, and nothing on Dispatches.
const (
	TenantRole     = "trainyard-tenant"
	TenantViewRole = "trainyard-tenant-view"
)

// lacksRights says, for an error the API server's authorization gave, what
// the user may not do in namespace ns and which role an administrator
// binds there to allow it; other errors are returned as they are. role is
// TenantRole for writes (logs ask through a LogRequest), TenantViewRole
// for reads.
func lacksRights(err error, doing, ns, role string) error {
	if !apierrors.IsForbidden(err) {
		return err
	}
	return fmt.Errorf("you may not %s in namespace %s: %w; an administrator grants it by binding the ClusterRole %s "+
		"(or the built-in %s role, which includes it) to you in that namespace", doing, ns, err, role, builtIn(role))
}

func builtIn(role string) string {
	if role == TenantViewRole {
		return "view"
	}
	return "edit"
}
