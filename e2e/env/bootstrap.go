package env

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// podRules are what an executor needs: read pods, and the streaming
// subresources. get and create both, because kube-apiserver 1.35+ authorizes
// a WebSocket GET upgrade as create too.
var podRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach", "pods/portforward"}, Verbs: []string{"get", "create"}},
	{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
	// kubectl debug
	{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers"}, Verbs: []string{"patch", "update"}},
}

// serviceProxyGetRule lets exec-karmada-only GET (not POST, ...) through
// services/proxy, so tests see the verb follow the method.
var serviceProxyGetRule = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services/proxy"}, Verbs: []string{"get"}}

var clusterProxyRule = rbacv1.PolicyRule{
	APIGroups: []string{"cluster.karmada.io"},
	Resources: []string{"clusters/proxy"},
	Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"},
}

func (e *Env) bootstrap(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, 1+len(e.opts.Members))
	wg.Go(func() { errs[0] = e.bootstrapKarmada(ctx) })
	for i, m := range e.opts.Members {
		wg.Go(func() { errs[i+1] = e.bootstrapMember(ctx, m) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (e *Env) bootstrapKarmada(ctx context.Context) error {
	cfg := e.KarmadaConfig(UserAdmin)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// CRDs first: establishing them is the slow part and the rest can overlap.
	crdNames, err := applyCRDs(ctx, dyn, e.opts.CRDDir)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, ns := range []string{Namespace, KarmadaSystem, KarmadaCluster} {
		if err := createNamespace(ctx, cs, ns); err != nil {
			return err
		}
	}
	rbac := []rbacObject{
		role(Namespace, "e2e:executor", podRules...),
		roleBinding(Namespace, "e2e:executor", "Role", "e2e:executor", UserExecOnly),
		roleBinding(Namespace, "e2e:executor-karmada-only", "Role", "e2e:executor", UserExecKarmadaOnly),
		role(Namespace, "e2e:service-proxy-get", serviceProxyGetRule),
		roleBinding(Namespace, "e2e:service-proxy-get", "Role", "e2e:service-proxy-get", UserExecKarmadaOnly),
		// Executors read their pods' events (GitLab Runner's pod events, Jenkins).
		role(Namespace, "e2e:events-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}}),
		roleBinding(Namespace, "e2e:events-reader", "Role", "e2e:events-reader", UserExecKarmadaOnly),
		// Passthrough callers, as an operator binds them on real Karmada: the
		// user and each of its groups (the cluster proxy impersonates them
		// all, and Karmada's unified-auth controller lets its impersonator
		// impersonate only subjects of ClusterRoleBindings to clusters/proxy).
		clusterRole("e2e:cluster-proxy", clusterProxyRule),
		clusterRoleBindingTo("e2e:cluster-proxy", "e2e:cluster-proxy",
			userSubject(UserAdmin), groupSubject("system:masters"),
			userSubject(UserExecOnly), groupSubject(GroupExecutors),
			// Bound as a user only: its group GroupUnbound is not.
			userSubject(UserExecGroupUnbound)),
		roleBinding(Namespace, "e2e:executor-group-unbound", "Role", "e2e:executor", UserExecGroupUnbound),
		role(Namespace, "e2e:pod-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}),
		roleBinding(Namespace, "e2e:pod-reader", "Role", "e2e:pod-reader", UserNoExec),
	}
	if err := applyRBAC(ctx, cs, rbac); err != nil {
		return err
	}
	return waitCRDs(ctx, dyn, crdNames)
}

// bootstrapMember creates the member-side RBAC a cluster admin gives the
// executors the cluster proxy impersonates in passthrough mode (Karmada
// creates none). The gateway's identity gets its authorize-mode RBAC from
// the chart (applyGatewayRBAC); what the impersonator may impersonate is
// Karmada's unified-auth controller's to push.
func (e *Env) bootstrapMember(ctx context.Context, member string) error {
	cs, err := kubernetes.NewForConfig(e.MemberConfig(member))
	if err != nil {
		return err
	}
	if err := createNamespace(ctx, cs, Namespace); err != nil {
		return err
	}
	rbac := []rbacObject{
		role(Namespace, "e2e:executor", podRules...),
		roleBinding(Namespace, "e2e:executor", "Role", "e2e:executor", UserExecOnly),
		roleBinding(Namespace, "e2e:executor-group-unbound", "Role", "e2e:executor", UserExecGroupUnbound),
	}
	return applyRBAC(ctx, cs, rbac)
}

func createNamespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	return create(ctx, cs.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// create calls a typed Create and treats AlreadyExists as success, so a
// restarted member (same etcd data) or a kept work dir is fine.
func create[T any](ctx context.Context, fn func(context.Context, T, metav1.CreateOptions) (T, error), obj T) error {
	if _, err := fn(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T: %w", obj, err)
	}
	return nil
}

type rbacObject func(ctx context.Context, cs kubernetes.Interface) error

func applyRBAC(ctx context.Context, cs kubernetes.Interface, objs []rbacObject) error {
	for _, o := range objs {
		if err := o(ctx, cs); err != nil {
			return err
		}
	}
	return nil
}

func role(ns, name string, rules ...rbacv1.PolicyRule) rbacObject {
	return func(ctx context.Context, cs kubernetes.Interface) error {
		return create(ctx, cs.RbacV1().Roles(ns).Create, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules})
	}
}

func clusterRole(name string, rules ...rbacv1.PolicyRule) rbacObject {
	return func(ctx context.Context, cs kubernetes.Interface) error {
		return create(ctx, cs.RbacV1().ClusterRoles().Create, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules})
	}
}

func userSubject(user string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}
}

func groupSubject(group string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}
}

func roleBinding(ns, name, kind, roleName, user string) rbacObject {
	return func(ctx context.Context, cs kubernetes.Interface) error {
		return create(ctx, cs.RbacV1().RoleBindings(ns).Create, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: roleName},
			Subjects:   []rbacv1.Subject{userSubject(user)},
		})
	}
}

func clusterRoleBindingTo(name, roleName string, subjects ...rbacv1.Subject) rbacObject {
	return func(ctx context.Context, cs kubernetes.Interface) error {
		return create(ctx, cs.RbacV1().ClusterRoleBindings().Create, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
			Subjects:   subjects,
		})
	}
}

// applyCRDs creates every CRD in dir and returns their names.
func applyCRDs(ctx context.Context, dyn dynamic.Interface, dir string) ([]string, error) {
	files, err := crdFiles(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range splitYAML(data) {
			var obj map[string]any
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				return nil, fmt.Errorf("parse %s: %w", f, err)
			}
			u := &unstructured.Unstructured{Object: obj}
			if u.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if _, err := dyn.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("create CRD from %s: %w", f, err)
			}
			names = append(names, u.GetName())
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", dir)
	}
	return names, nil
}

func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

// waitCRDs waits until every CRD is Established and its resource is served
// (listing it answers), so the first create of a custom object cannot 404.
func waitCRDs(ctx context.Context, dyn dynamic.Interface, names []string) error {
	for _, name := range names {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			u, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			established := false
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					established = true
				}
			}
			if !established {
				last = "not established"
				return false, nil
			}
			group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
			plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
			versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
			for _, v := range versions {
				m, _ := v.(map[string]any)
				if served, _ := m["served"].(bool); !served {
					continue
				}
				version, _ := m["name"].(string)
				gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: plural}
				if _, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
					last = fmt.Sprintf("list %s: %v", gvr, err)
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("wait for CRD %s (%s): %w", name, strings.TrimSpace(last), err)
		}
	}
	return nil
}
