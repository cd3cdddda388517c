package e2e

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// TestPodProxyAuthorizeMode: in authorize mode pods/proxy reaches the pod's
// member as the gateway's own identity, with only the RBAC the chart gives
// it (the environment applies the chart's): clusters/proxy in
// karmada-apiserver for the verb of every method, and pods/proxy in the
// member, propagated there by Karmada. For each method the answer is the
// member's own, the one the cluster proxy gives an admin by hand (the
// member's refusal to proxy to the pod's loopback address, which it checks
// after RBAC: a rule the chart lacks shows as a 403 instead). A caller
// without pods/proxy in karmada-apiserver gets karmada-apiserver's own 403.
func TestPodProxyAuthorizeMode(t *testing.T) {
	dumpLogsOnFailure(t)
	const name, member = "podproxy-authz", "member1"
	placePod(t, sleepPod(name), []string{member}, member)
	restartGatewayFor(t, []string{"--auth-mode=authorize"}, "--auth-mode=passthrough")

	admin := testEnv.Token(env.UserAdmin)
	path := "/api/v1/namespaces/" + env.Namespace + "/pods/" + name + ":8080/proxy/session?q=a+b"
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		byHandCode, byHand := rawAnswer(t, method, testEnv.KarmadaURL()+karmada.ClusterProxyPath(member, path), admin)
		if byHandCode == http.StatusForbidden || byHandCode == http.StatusUnauthorized {
			t.Fatalf("%s through the cluster proxy as %s answered %d %s: the environment's admin must reach the member", method, env.UserAdmin, byHandCode, byHand)
		}
		routed := countRoute(t, "podproxy", strconv.Itoa(byHandCode))
		code, body := rawAnswer(t, method, testEnv.GatewayURL()+path, admin)
		if code != byHandCode || !bytes.Equal(body, byHand) {
			t.Errorf("authorize mode: %s %s through the gateway answered %d %s, want the member's own answer %d %s", method, path, code, body, byHandCode, byHand)
		}
		routed.check(t, 1)
	}

	refusedPath := "/api/v1/namespaces/" + env.Namespace + "/pods/" + name + ":8080/proxy/"
	noExec := testEnv.Token(env.UserNoExec)
	fromGateway := rawStatus(t, http.MethodGet, testEnv.GatewayURL()+refusedPath, noExec)
	fromKarmada := rawStatus(t, http.MethodGet, testEnv.KarmadaURL()+refusedPath, noExec)
	if fromGateway.Code != http.StatusForbidden || !reflect.DeepEqual(fromGateway, fromKarmada) {
		t.Errorf("authorize mode: GET pods/proxy as %s through the gateway answered\n %+v\nkarmada-apiserver answers\n %+v", env.UserNoExec, fromGateway, fromKarmada)
	}
}

// TestClientCertificateAuthorizeMode: in authorize mode a caller with a
// client certificate of the environment's CA reaches non-pod routes as
// itself, the gateway impersonating its user and group upstream (the
// chart's impersonate rules): it reads a ConfigMap its group may read and
// the gateway's own identity may not, and patching a pod, which the gateway
// may do and it may not, gets the very 403 karmada-apiserver gives the
// same certificate directly.
func TestClientCertificateAuthorizeMode(t *testing.T) {
	dumpLogsOnFailure(t)
	ctx := t.Context()
	const (
		user   = "e2e-cert-caller"
		group  = "e2e:cert-readers"
		object = "cert-caller"
	)
	admin, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e:cert-configmap-reader", Namespace: env.Namespace},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: env.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: group}},
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: object, Namespace: env.Namespace}, Data: map[string]string{"who": "certificate callers"}}
	// Deleted when t ends, whatever was created before a failure.
	var cleanups []func(context.Context) error
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, del := range cleanups {
			if err := del(ctx); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	if _, err := admin.RbacV1().Roles(env.Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cleanups = append(cleanups, func(ctx context.Context) error {
		return admin.RbacV1().Roles(env.Namespace).Delete(ctx, role.Name, metav1.DeleteOptions{})
	})
	if _, err := admin.RbacV1().RoleBindings(env.Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cleanups = append(cleanups, func(ctx context.Context) error {
		return admin.RbacV1().RoleBindings(env.Namespace).Delete(ctx, binding.Name, metav1.DeleteOptions{})
	})
	if _, err := admin.CoreV1().ConfigMaps(env.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cleanups = append(cleanups, func(ctx context.Context) error {
		return admin.CoreV1().ConfigMaps(env.Namespace).Delete(ctx, object, metav1.DeleteOptions{})
	})

	// Reading the ConfigMap is the caller's right, never the gateway's: a
	// success through the gateway can only be the caller's identity.
	gatewayIdentity, err := testEnv.KarmadaClient(env.UserGateway)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gatewayIdentity.CoreV1().ConfigMaps(env.Namespace).Get(ctx, object, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("get configmap %s as %s: %v, want Forbidden", object, env.UserGateway, err)
	}

	certPEM, keyPEM, err := testEnv.ClientCertificate(user, group)
	if err != nil {
		t.Fatal(err)
	}
	certClient := func(host string) kubernetes.Interface {
		cs, err := kubernetes.NewForConfig(&rest.Config{
			Host:            host,
			TLSClientConfig: rest.TLSClientConfig{CAData: testEnv.CAPEM(), CertData: certPEM, KeyData: keyPEM},
		})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}

	restartGatewayFor(t, []string{"--auth-mode=authorize"}, "--auth-mode=passthrough")
	through := certClient(testEnv.GatewayURL())
	got, err := through.CoreV1().ConfigMaps(env.Namespace).Get(ctx, object, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("authorize mode: get configmap %s with %s's certificate: %v", object, user, err)
	}
	if !reflect.DeepEqual(got.Data, cm.Data) {
		t.Errorf("authorize mode: configmap %s read with %s's certificate holds %v, want %v", object, user, got.Data, cm.Data)
	}

	// The labeler's right to patch pods is the gateway's, not the caller's.
	patch := []byte(`{"metadata":{"labels":{"e2e-cert-caller":"patched"}}}`)
	statusOf := func(cs kubernetes.Interface) metav1.Status {
		_, err := cs.CoreV1().Pods(env.Namespace).Patch(ctx, "cert-caller-pod", types.MergePatchType, patch, metav1.PatchOptions{})
		var st apierrors.APIStatus
		if !errors.As(err, &st) {
			t.Fatalf("patch a pod with %s's certificate: %v, want a Status", user, err)
		}
		return st.Status()
	}
	fromGateway, fromKarmada := statusOf(through), statusOf(certClient(testEnv.KarmadaURL()))
	if fromGateway.Code != http.StatusForbidden || !reflect.DeepEqual(fromGateway, fromKarmada) {
		t.Errorf("authorize mode: patch a pod with %s's certificate through the gateway answered\n %+v\nkarmada-apiserver answers the certificate itself\n %+v", user, fromGateway, fromKarmada)
	}
}
