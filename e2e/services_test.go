package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

var (
	httpechoOnce sync.Once
	httpechoPath string
	httpechoErr  error
)

func httpecho(t *testing.T) string {
	t.Helper()
	httpechoOnce.Do(func() {
		out := filepath.Join(testEnv.WorkDir(), "httpecho")
		cmd := exec.Command("go", "build", "-o", out, "./cmd/httpecho")
		if b, err := cmd.CombinedOutput(); err != nil {
			httpechoErr = fmt.Errorf("go build ./cmd/httpecho: %w\n%s", err, b)
			return
		}
		httpechoPath = out
	})
	if httpechoErr != nil {
		t.Fatal(httpechoErr)
	}
	return httpechoPath
}

// TestServiceProxy reaches a federated Service's pods through
// services/{scheme:name:port}/proxy as GitLab Runner's session server does:
// placed by its own ResourceBinding, by the one cluster of the pods it
// selects, and refused with a Status when those pods run on both members.
func TestServiceProxy(t *testing.T) {
	dumpLogsOnFailure(t)
	ctx := t.Context()
	enableServiceProxy(t)

	karmadaCS, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	// The member apiserver proxies only to EndpointSlice addresses that are
	// pods' IPs (every pod here has 127.0.0.1) and nothing maintains
	// EndpointSlices in the members, so the test writes them.
	startEcho := func(t *testing.T, name, member string, labels map[string]string) int {
		pod := env.ShellPod(env.Namespace, name, "")
		pod.Labels = labels
		pod.Spec.Containers[0].Command = []string{httpecho(t), "-name=" + name}
		placePod(t, pod, []string{member}, member)
		return listeningPort(t, name)
	}
	memberService := func(t *testing.T, member, svc, pod string, port int) {
		cs, err := testEnv.MemberClient(member)
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: env.Namespace},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(int32(port))}}},
		}
		if _, err := cs.CoreV1().Services(env.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create service in %s: %v", member, err)
		}
		ready := true
		es := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: svc + "-e2e", Namespace: env.Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{"127.0.0.1"},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: env.Namespace, Name: pod},
			}},
			Ports: []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(port)), Protocol: new(corev1.ProtocolTCP)}},
		}
		es.TypeMeta = metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}
		putEndpointSlice(t, member, es)
		// The member's EndpointSlice cache must have it before a request.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := cs.DiscoveryV1().EndpointSlices(env.Namespace).Get(ctx, es.Name, metav1.GetOptions{})
			return err == nil, nil
		}); err != nil {
			t.Fatalf("endpointslice %s not readable in %s: %v", es.Name, member, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cs.DiscoveryV1().EndpointSlices(env.Namespace).Delete(ctx, es.Name, metav1.DeleteOptions{})
			_ = cs.CoreV1().Services(env.Namespace).Delete(ctx, svc, metav1.DeleteOptions{})
		})
	}
	karmadaService := func(t *testing.T, name string, selector map[string]string) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.Namespace},
			Spec:       corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}
		created, err := karmadaCS.CoreV1().Services(env.Namespace).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create service in karmada-apiserver: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = karmadaCS.CoreV1().Services(env.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		})
		return created
	}
	gw := gatewayClient(t, env.UserAdmin)
	get := func(ctx context.Context, seg, rest string) ([]byte, error) {
		return gw.CoreV1().RESTClient().Get().
			AbsPath("/api/v1/namespaces/"+env.Namespace+"/services/"+seg+"/proxy"+rest).
			Param("q", "a b").DoRaw(ctx)
	}
	// getStatus is get for an answer that must be the gateway's Status:
	// client-go keeps the body of an error but does not decode it for a
	// proxy request.
	getStatus := func(ctx context.Context, seg string) (metav1.Status, error) {
		var st metav1.Status
		body, err := get(ctx, seg, "/")
		if err == nil {
			return st, fmt.Errorf("got %q, want a Status", body)
		}
		if jerr := json.Unmarshal(body, &st); jerr != nil || st.Kind != "Status" {
			return st, fmt.Errorf("answer %q (%v) is not a Status", body, err)
		}
		return st, nil
	}
	// The gateway learns of a new Service by its watch: poll until it answers.
	waitAnswer := func(t *testing.T, seg, rest, want string) {
		t.Helper()
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			b, err := get(ctx, seg, rest)
			if err != nil {
				if ctx.Err() == nil {
					last = err.Error()
				}
				return false, nil
			}
			last = string(b)
			return last == want, nil
		})
		if err != nil {
			t.Fatalf("GET services/%s/proxy%s through the gateway: last answer %q, want %q: %v", seg, rest, last, want, err)
		}
	}

	t.Run("placed by its own binding", func(t *testing.T) {
		const name = "svcproxy-placed"
		port := startEcho(t, name, "member2", nil)
		svc := karmadaService(t, name, nil)
		memberService(t, "member2", name, name, port)
		createServiceBinding(t, svc, "member2")
		// AbsPath escapes "%", so the pod must see a%252Fb: the escaped
		// form the client sent, unchanged by the gateway and the proxies.
		waitAnswer(t, "http:"+name+":http", "/session/a%2Fb", name+" GET /session/a%252Fb?q=a+b")
	})

	t.Run("fallback to the selected pods' cluster", func(t *testing.T) {
		const name = "svcproxy-fallback"
		labels := map[string]string{"app": name}
		port := startEcho(t, name, "member1", labels)
		karmadaService(t, name, labels)
		memberService(t, "member1", name, name, port)
		waitAnswer(t, name+":80", "/", name+" GET /?q=a+b")
	})

	t.Run("selected pods on both members", func(t *testing.T) {
		const name = "svcproxy-both"
		labels := map[string]string{"app": name}
		for _, m := range []string{"member1", "member2"} {
			pod := sleepPod(name + "-" + m)
			pod.Labels = labels
			placePod(t, pod, []string{m}, m)
		}
		karmadaService(t, name, labels)
		var st metav1.Status
		var last error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			st, last = getStatus(ctx, name)
			return last == nil && st.Code == http.StatusConflict, nil
		})
		if err != nil {
			t.Fatalf("want a 409 Conflict Status, last %+v, %v", st, last)
		}
		if msg := st.Message; st.Reason != metav1.StatusReasonConflict || !strings.Contains(msg, "member1") || !strings.Contains(msg, "member2") {
			t.Errorf("Status %q does not name both candidate clusters", msg)
		}
	})

	t.Run("no such service", func(t *testing.T) {
		st, err := getStatus(ctx, "svcproxy-missing")
		if err != nil || st.Code != http.StatusNotFound || st.Reason != metav1.StatusReasonNotFound ||
			st.Message != `services "svcproxy-missing" not found` {
			t.Fatalf("want the NotFound Status, got %+v, %v", st, err)
		}
	})
}

// enableServiceProxy grants the gateway list/watch on services and restarts
// it with --enable-service-proxy, both undone when t ends.
func enableServiceProxy(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	cs, err := testEnv.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	const rbacName = "e2e:gateway-services"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: rbacName},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: rbacName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rbacName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: env.UserGateway}},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, rbacName, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(ctx, rbacName, metav1.DeleteOptions{})
	})
	if err := testEnv.RestartGateway(ctx, "--enable-service-proxy"); err != nil {
		t.Fatalf("restart gateway with --enable-service-proxy: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// RestartGateway keeps the previous arguments when given none.
		if err := testEnv.RestartGateway(ctx, "--enable-service-proxy=false"); err != nil {
			t.Errorf("restore gateway: %v", err)
		}
	})
}

// putEndpointSlice writes es into member's storage in etcd, past the
// apiserver: EndpointSlice validation refuses loopback addresses, every pod
// here is a local process on 127.0.0.1 (the e2e runs only on loopback), and
// no endpoints controller runs in the members to write one. The apiserver
// reads JSON from etcd as well as protobuf.
func putEndpointSlice(t *testing.T, member string, es *discoveryv1.EndpointSlice) {
	t.Helper()
	value, err := json.Marshal(es)
	if err != nil {
		t.Fatal(err)
	}
	key := "/" + member + "/endpointslices/" + es.Namespace + "/" + es.Name
	etcdKV := func(op string, body map[string]string) {
		b, _ := json.Marshal(body)
		resp, err := http.Post(testEnv.EtcdURL()+"/v3/kv/"+op, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatalf("etcd %s: %v", op, err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("etcd %s: %s %s", op, resp.Status, out)
		}
	}
	etcdKV("put", map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString(value)})
	t.Cleanup(func() {
		etcdKV("deleterange", map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key))})
	})
}

// createServiceBinding places svc on cluster the way Karmada records it: a
// ResourceBinding in the Service's namespace whose spec.resource is it.
func createServiceBinding(t *testing.T, svc *corev1.Service, cluster string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(testEnv.KarmadaConfig(env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	b := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": karmada.ResourceBindingGVR.GroupVersion().String(),
		"kind":       "ResourceBinding",
		"metadata":   map[string]any{"name": karmada.BindingName(svc.Name, "Service"), "namespace": svc.Namespace},
		"spec": map[string]any{
			"resource": map[string]any{
				"apiVersion": "v1", "kind": "Service", "namespace": svc.Namespace, "name": svc.Name, "uid": string(svc.UID),
			},
			"clusters": []any{map[string]any{"name": cluster}},
		},
	}}
	client := dyn.Resource(karmada.ResourceBindingGVR).Namespace(svc.Namespace)
	if _, err := client.Create(t.Context(), b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ResourceBinding: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Delete(ctx, b.GetName(), metav1.DeleteOptions{})
	})
}

// listeningPort reads the port an echo server printed as its first log line.
func listeningPort(t *testing.T, pod string) int {
	t.Helper()
	kubeconfig := testEnv.GatewayKubeconfig(env.UserAdmin)
	var port int
	var lastLog string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, _, err := testEnv.RunKubectl(ctx, kubeconfig, nil, "logs", pod)
		if err != nil {
			lastLog = err.Error()
			return false, nil
		}
		lastLog = out
		if m := listeningRE.FindStringSubmatch(out); m != nil {
			port, err = strconv.Atoi(m[1])
			return err == nil, err
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("read the port of %s from its log (last: %q): %v", pod, lastLog, err)
	}
	return port
}
