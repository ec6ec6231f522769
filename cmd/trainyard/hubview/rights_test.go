package hubview

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestLacksRights(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "trainer.kubeflow.org", Resource: "trainjobs"}, "llama",
		errors.New(`User "bob" cannot get resource "trainjobs"`))
	err := lacksRights(forbidden, "read trainjob llama", "team-a", TenantViewRole)
	for _, want := range []string{"you may not read trainjob llama in namespace team-a", `User "bob" cannot get`,
		"ClusterRole trainyard-tenant-view", "built-in view role"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if !apierrors.IsForbidden(err) {
		t.Errorf("the wrapped error is no longer Forbidden: %v", err)
	}
	if err := lacksRights(forbidden, "ask for logs", "team-a", TenantRole); !strings.Contains(err.Error(), "built-in edit role") {
		t.Errorf("logs: %v", err)
	}
	other := apierrors.NewNotFound(schema.GroupResource{Resource: "trainjobs"}, "llama")
	if got := lacksRights(other, "read trainjob llama", "team-a", TenantViewRole); got != other {
		t.Errorf("a not-found error became %v", got)
	}
}
