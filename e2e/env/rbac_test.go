package env

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestGatewayChartValues: the release the environment renders binds every
// role to the environment's gateway user and nothing else, holds the member
// RBAC with the policy that propagates it, and no Pod status interpreter.
func TestGatewayChartValues(t *testing.T) {
	root, err := FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := os.Getenv("HELM")
	if helm == "" {
		helm = filepath.Join(root, "bin", "helm")
	}
	objs, err := renderChart(t.Context(), helm, filepath.Join(root, "charts", "gateway"), t.TempDir(), gatewayRelease, KarmadaSystem, gatewayChartValues)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
		if o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "RoleBinding" {
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		// member-trust's bindings are its own identity's, never the
		// gateway's: the gateway may not read the members' Secrets.
		user := UserGateway
		switch o.GetName() {
		case gatewayRelease + "-member-trust", gatewayRelease + "-member-trust-read", gatewayRelease + "-member-trust-publish":
			user = UserMemberTrust
		}
		want := []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}}
		if !reflect.DeepEqual(subjects, want) {
			t.Errorf("%s %s binds %v, want only user %s", o.GetKind(), o.GetName(), subjects, user)
		}
	}
	slices.Sort(kinds)
	want := []string{"ClusterPropagationPolicy", "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "ClusterRoleBinding", "ClusterRoleBinding",
		"Role", "Role", "Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "RoleBinding", "Secret"}
	if !slices.Equal(kinds, want) {
		t.Errorf("rendered %v, want %v (gateway, clusters/proxy and member RBAC, the lease Role, the published Secret's Role, member-trust's RBAC, the published Secret, the member policy)", kinds, want)
	}
}
