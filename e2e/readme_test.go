package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/helmtest"
)

// readmeYAMLBlock returns the one yaml block of the repository's README.md
// that contains marker.
func readmeYAMLBlock(t *testing.T, marker string) string {
	t.Helper()
	var found []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(helmtest.Readme(t), -1) {
		if strings.Contains(m[1], marker) {
			found = append(found, m[1])
		}
	}
	if len(found) != 1 {
		t.Fatalf("README.md has %d yaml blocks with %q, want 1", len(found), marker)
	}
	return found[0]
}

// TestReadmeMemberRBACPolicy applies README's executor member RBAC (a Role,
// a RoleBinding and the PropagationPolicy that sends them) to
// karmada-apiserver as it is written, and checks what the README says of
// it on real Karmada: both reach every member (the namespace too, created
// there by Karmada); deleting the policy leaves them in the members;
// deleting the Role and RoleBinding in karmada-apiserver removes them
// there.
func TestReadmeMemberRBACPolicy(t *testing.T) {
	dumpLogsOnFailure(t)
	ctx := t.Context()
	manifest := readmeYAMLBlock(t, "kind: RoleBinding")
	const ns, name, policy = "ci", "ci-executor", "ci-executor-rbac"
	for _, want := range []string{"namespace: " + ns, "name: " + name, "name: " + policy} {
		if !strings.Contains(manifest, want) {
			t.Fatalf("README's member RBAC block lacks %q; the test names what it creates:\n%s", want, manifest)
		}
	}

	karmada, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := karmada.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = testEnv.DeletePolicy(ctx, ns, policy)
		_ = karmada.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	if _, _, err := testEnv.RunKubectl(ctx, testEnv.Kubeconfig(env.UserAdmin), strings.NewReader(manifest), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}

	members := map[string]kubernetes.Interface{}
	for _, m := range testEnv.Members() {
		if members[m], err = testEnv.MemberClient(m); err != nil {
			t.Fatal(err)
		}
	}
	inMember := func(ctx context.Context, c kubernetes.Interface) (bool, error) {
		_, err := c.RbacV1().Roles(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, err = c.RbacV1().RoleBindings(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil, err
	}
	for m, c := range members {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			ok, _ := inMember(ctx, c)
			return ok, nil
		})
		if err != nil {
			t.Fatalf("Role and RoleBinding %s/%s never reached %s: %v", ns, name, m, err)
		}
	}

	// Karmada takes its claim off the templates once it handled the
	// policy's deletion; the members' copies must still be there then.
	const claim = "propagationpolicy.karmada.io/permanent-id"
	claimed := func(ctx context.Context) (role, binding bool, err error) {
		r, err := karmada.RbacV1().Roles(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, false, err
		}
		b, err := karmada.RbacV1().RoleBindings(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, false, err
		}
		return r.Labels[claim] != "", b.Labels[claim] != "", nil
	}
	if role, binding, err := claimed(ctx); err != nil || !role || !binding {
		t.Fatalf("propagated templates without Karmada's %s label (Role %v, RoleBinding %v, %v)", claim, role, binding, err)
	}
	if err := testEnv.DeletePolicy(ctx, ns, policy); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		role, binding, err := claimed(ctx)
		return !role && !binding, err
	})
	if err != nil {
		t.Fatalf("Karmada never released the templates after the policy was deleted: %v", err)
	}
	for m, c := range members {
		if ok, err := inMember(ctx, c); !ok {
			t.Errorf("deleting the policy removed the RBAC from %s (%v); README says it stays", m, err)
		}
	}

	if err := karmada.RbacV1().RoleBindings(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := karmada.RbacV1().Roles(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for m, c := range members {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			_, errRole := c.RbacV1().Roles(ns).Get(ctx, name, metav1.GetOptions{})
			_, errBinding := c.RbacV1().RoleBindings(ns).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(errRole) && apierrors.IsNotFound(errBinding), nil
		})
		if err != nil {
			t.Errorf("deleting the templates did not remove the RBAC from %s: %v", m, err)
		}
	}
}
