package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/helmtest"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/monitoring"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// readmeShell runs README commands as a user types them: with bash, in a
// directory holding the user's own files (tls.crt, tls.key) and the
// repository's charts/, with bin/ (kubectl, helm) first on PATH and the
// host cluster's admin kubeconfig as KUBECONFIG, helm's state kept in the
// directory.
type readmeShell struct {
	dir     string
	environ []string
	// serviceName is what the serving certificate names: the Service, as
	// the README asks.
	serviceName string
	caPEM       []byte
}

// karmadaContext is the kubeconfig context the README's commands name for
// karmada-apiserver.
const karmadaContext = "karmada-apiserver"

// newReadmeShell prepares the directory. The serving certificate names only
// the Service (README: "tls.crt must name the Service"), signed by a CA of
// the test's own, the user's PKI.
func newReadmeShell(t *testing.T, e *env.Env, service string) *readmeShell {
	t.Helper()
	root, err := env.FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "charts"), filepath.Join(dir, "charts")); err != nil {
		t.Fatal(err)
	}
	caPEM, certPEM, keyPEM := servingCertificate(t, service)
	for name, b := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "gateway-ca.crt": caPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The user's kubeconfig: the host cluster as its current context, and
	// karmada-apiserver as the context the README names.
	cfg, err := clientcmd.LoadFromFile(e.HostKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	karmadaCfg, err := clientcmd.LoadFromFile(e.Kubeconfig(env.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	k := karmadaCfg.Contexts[karmadaCfg.CurrentContext]
	cfg.Clusters[karmadaContext] = karmadaCfg.Clusters[k.Cluster]
	cfg.AuthInfos[karmadaContext] = karmadaCfg.AuthInfos[k.AuthInfo]
	cfg.Contexts[karmadaContext] = &clientcmdapi.Context{Cluster: karmadaContext, AuthInfo: karmadaContext}
	kubeconfig := filepath.Join(dir, ".kube", "config")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	environ := append(os.Environ(),
		"PATH="+e.BinDir()+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+kubeconfig,
		"HELM_CONFIG_HOME="+filepath.Join(dir, ".helm", "config"),
		"HELM_CACHE_HOME="+filepath.Join(dir, ".helm", "cache"),
		"HELM_DATA_HOME="+filepath.Join(dir, ".helm", "data"),
		"HOME="+dir,
	)
	return &readmeShell{dir: dir, environ: environ, serviceName: service, caPEM: caPEM}
}

// run runs one command line with bash and returns its combined output.
func (s *readmeShell) run(ctx context.Context, line string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", line)
	cmd.Dir, cmd.Env = s.dir, s.environ
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w\n%s", line, err, out.String())
	}
	return out.String(), nil
}

func (s *readmeShell) mustRun(t *testing.T, line string) string {
	t.Helper()
	t.Logf("$ %s", line)
	out, err := s.run(t.Context(), line)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// servingCertificate is a CA and a serving certificate for name, as a
// user's PKI issues one.
func servingCertificate(t *testing.T, name string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway-test-ca"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caKey, caDER := signCertificate(t, caTmpl, nil, nil)
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	key, der := signCertificate(t, tmpl, ca, caKey)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// signCertificate makes a key for tmpl and signs it with parent's key, or
// with its own when parent is nil.
func signCertificate(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

// readmeInstall is what README's "Install with Helm" section says to run.
type readmeInstall struct {
	secret, install, uninstall, upgrade string
	release, namespace                  string
	// authorize is the install line's option for authorize mode, from the
	// section's comment, without its optional [...] part.
	authorize string
	// hooks and labeled are the section's inline commands that show what
	// the hook applied: the hook ConfigMap through helm, the labeled
	// objects in karmada-apiserver.
	hooks, labeled string
}

func readReadmeInstall(t *testing.T) readmeInstall {
	t.Helper()
	var r readmeInstall
	installRE := regexp.MustCompile(`^helm install (\S+) charts/gateway -n (\S+)$`)
	for _, line := range helmtest.ReadmeHelmSection(t) {
		switch {
		case strings.HasPrefix(line, "kubectl ") && strings.Contains(line, " create secret tls ") && r.secret == "":
			r.secret = line
		case installRE.MatchString(line) && r.install == "":
			r.install = line
			m := installRE.FindStringSubmatch(line)
			r.release, r.namespace = m[1], m[2]
		case strings.HasPrefix(line, "helm uninstall ") && r.uninstall == "":
			r.uninstall = line
		case strings.HasPrefix(line, "# change a value:"):
			r.upgrade = strings.TrimSpace(strings.TrimPrefix(line, "# change a value:"))
		case strings.HasPrefix(line, "# authorize mode:"):
			opt := strings.TrimSpace(strings.TrimPrefix(line, "# authorize mode:"))
			opt, _, _ = strings.Cut(opt, "[")
			r.authorize = strings.TrimSpace(opt)
		}
	}
	for _, m := range regexp.MustCompile("`((?:helm\\s+get\\s+hooks|kubectl\\s+--context\\s+"+karmadaContext+"\\s+get)\\s[^`]*)`").FindAllStringSubmatch(helmtest.Readme(t), -1) {
		cmd := strings.Join(strings.Fields(m[1]), " ") // wrapped over lines in the README
		if strings.HasPrefix(cmd, "helm") {
			r.hooks = cmd
		} else {
			r.labeled = cmd
		}
	}
	if r.hooks == "" || r.labeled == "" {
		t.Fatalf("README's Helm section lacks the helm get hooks (%q) or the kubectl --context %s get -l (%q) commands", r.hooks, karmadaContext, r.labeled)
	}
	if r.secret == "" || r.install == "" || r.uninstall == "" || r.authorize == "" || !strings.HasPrefix(r.upgrade, "helm upgrade ") {
		t.Fatalf("README's Helm section lacks the TLS Secret (%q), the plain install (%q), the uninstall (%q), the authorize mode option (%q) or the upgrade (%q)",
			r.secret, r.install, r.uninstall, r.authorize, r.upgrade)
	}
	return r
}

// podStatusInterpreter is the name of the chart's Pod status interpreter,
// the deploy/karmada file as it is (without the release's labels).
const podStatusInterpreter = "karmada-exec-gateway-pod-status"

// karmadaObjects lists what a release's hook Job applied to
// karmada-apiserver, by the release's instance label as the README lists
// them: "<kind> <name>" of ClusterRoles, ClusterRoleBindings, Roles and
// RoleBindings in karmada-system; and the Pod status interpreter, by name.
func karmadaObjects(ctx context.Context, e *env.Env, release string) ([]string, error) {
	dyn, err := dynamic.NewForConfig(e.KarmadaConfig(env.UserAdmin))
	if err != nil {
		return nil, err
	}
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
	var out []string
	for _, r := range []struct {
		gvr schema.GroupVersionResource
		ns  string
	}{
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, ""},
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, ""},
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, env.KarmadaSystem},
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, env.KarmadaSystem},
	} {
		list, err := dyn.Resource(r.gvr).Namespace(r.ns).List(ctx, sel)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", r.gvr.Resource, err)
		}
		for _, o := range list.Items {
			out = append(out, o.GetKind()+" "+o.GetName())
		}
	}
	ric := schema.GroupVersionResource{Group: "config.karmada.io", Version: "v1alpha1", Resource: "resourceinterpretercustomizations"}
	switch _, err := dyn.Resource(ric).Get(ctx, podStatusInterpreter, metav1.GetOptions{}); {
	case err == nil:
		out = append(out, "ResourceInterpreterCustomization "+podStatusInterpreter)
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// waitKarmadaObjects polls until cond holds for the release's objects.
func waitKarmadaObjects(ctx context.Context, e *env.Env, release, what string, cond func([]string) bool) ([]string, error) {
	var objs []string
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		objs, last = karmadaObjects(ctx, e, release)
		return last == nil && cond(objs), nil
	})
	if err != nil {
		return objs, fmt.Errorf("wait for the release's karmada-apiserver objects to be %s (have %v, %v): %w", what, objs, last, err)
	}
	return objs, nil
}

// gatewayPods returns the release's Ready gateway pods in the host.
func gatewayPods(ctx context.Context, host kubernetes.Interface, ns, release string) ([]corev1.Pod, error) {
	list, err := host.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/name=karmada-exec-gateway"})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Labels["app.kubernetes.io/component"] == "" && podReady(&p) {
			out = append(out, p)
		}
	}
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitReadyReplicas waits until exactly n gateway pods are Ready, which
// only the kubelet's readiness probe of /readyz sets.
func waitReadyReplicas(ctx context.Context, host kubernetes.Interface, ns, release string, n int) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	last := "no pods"
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = gatewayPods(ctx, host, ns, release); err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d Ready", len(pods))
		return len(pods) == n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for %d Ready gateway pods (%s): %w", n, last, err)
	}
	return pods, nil
}

// leaseHolder returns the holder of the labeler's Lease in karmada-apiserver.
func leaseHolder(ctx context.Context, e *env.Env) (string, error) {
	cs, err := e.KarmadaClient(env.UserAdmin)
	if err != nil {
		return "", err
	}
	l, err := cs.CoordinationV1().Leases(env.KarmadaSystem).Get(ctx, "karmada-exec-gateway-labeler", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// waitLeaderAmong waits until the Lease is held by one of pods (the
// labeler's identity is <hostname>_<uuid>, the hostname the pod's name) and
// returns that pod's name.
func waitLeaderAmong(ctx context.Context, e *env.Env, pods []string, timeout time.Duration) (string, error) {
	var holder string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, e)
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		holder = h
		name, _, _ := strings.Cut(h, "_")
		return slices.Contains(pods, name), nil
	})
	if err != nil {
		return "", fmt.Errorf("wait for the labeler Lease to be held by one of %v (holder %q): %w", pods, holder, err)
	}
	name, _, _ := strings.Cut(holder, "_")
	return name, nil
}

// readyWithLeader waits for the release's two Ready replicas and for one
// of them to hold the labeler's Lease.
func readyWithLeader(t *testing.T, e *env.Env, host kubernetes.Interface, ns, release string) (pods []corev1.Pod, names []string, leader string) {
	t.Helper()
	pods, err := waitReadyReplicas(t.Context(), host, ns, release, 2)
	if err != nil {
		t.Fatal(err)
	}
	names = []string{pods[0].Name, pods[1].Name}
	if leader, err = waitLeaderAmong(t.Context(), e, names, time.Minute); err != nil {
		t.Fatal(err)
	}
	return pods, names, leader
}

// portForwardService runs README-style `kubectl port-forward svc/<service>`
// on the host cluster and returns the local port. The host cluster has no
// kube-proxy and no routed Service network (nor has a user's laptop):
// port-forward is how a user reaches a ClusterIP Service from outside,
// through the host's kube-apiserver and kubelet, to a Ready pod behind it.
func portForwardService(t *testing.T, e *env.Env, ns, service string) string {
	t.Helper()
	pf := startEnvKubectl(t, e, e.HostKubeconfig(), nil, "-n", ns, "port-forward", "svc/"+service, ":443")
	if err := pf.waitOutput(t.Context(), "Forwarding from 127.0.0.1:", time.Minute); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) `).FindStringSubmatch(pf.stdout.String())
	if m == nil {
		t.Fatalf("no port in kubectl port-forward's output %q", pf.stdout.String())
	}
	return m[1]
}

// gatewayUserKubeconfig writes a kubeconfig for user through the installed
// gateway at 127.0.0.1:port: the CA that signed tls.crt and the Service's
// name as the TLS server name, since that is the name the certificate has.
func gatewayUserKubeconfig(t *testing.T, e *env.Env, sh *readmeShell, port, user string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gateway"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:" + port, CertificateAuthorityData: sh.caPEM, TLSServerName: sh.serviceName}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: e.Token(user)}
	cfg.Contexts["gateway"] = &clientcmdapi.Context{Cluster: "gateway", AuthInfo: user, Namespace: env.Namespace}
	cfg.CurrentContext = "gateway"
	path := filepath.Join(t.TempDir(), user+".installed-gateway.yaml")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// federatedPod creates a busybox pod template in karmada-apiserver placed
// by the test's policy, and waits until it runs in a member.
func federatedPod(t *testing.T, e *env.Env, name string) {
	t.Helper()
	ctx := t.Context()
	cs, err := e.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	pod := env.ShellPod(env.Namespace, name, "trap 'exit 0' TERM; while true; do sleep 1; done")
	if _, err := cs.CoreV1().Pods(env.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.DeletePod(context.Background(), env.Namespace, name) })
	if _, err := e.WaitPodRunning(ctx, env.Namespace, name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// execThrough runs kubectl exec with kubeconfig and returns stdout.
func execThrough(ctx context.Context, e *env.Env, kubeconfig, pod string, command ...string) (string, error) {
	out, _, err := e.RunKubectl(ctx, kubeconfig, nil, append([]string{"exec", pod, "--"}, command...)...)
	return out, err
}

// TestReadmeHelmInstallOnHostCluster runs README's "Install with Helm"
// section as written against a real Karmada host cluster (env.HostOptions):
// the TLS Secret from the user's tls.crt/tls.key (the only substitution: the
// test's own files, a certificate naming the Service), `helm install` with
// the chart's default values (the images they name are in the host's
// containerd), the pre-install hook Job applying the karmada-apiserver
// RBAC and Pod interpreter, two replicas Ready through the kubelet's
// probes, one labeler leader holding the Lease, kubectl exec through the
// installed gateway into a federated pod, and `helm uninstall`, whose
// pre-delete hook removes the karmada-apiserver objects. Then the same in
// authorize mode (the README's --set auth.mode=authorize), with an exec by
// a user only the gateway's authorization lets through.
func TestReadmeHelmInstallOnHostCluster(t *testing.T) {
	t.Parallel()
	// One member: what is tested here is the chart on the host cluster;
	// routing across members is every other test's. A second member was a
	// kube-apiserver, a kubelet and a containerd more on CI's two cores.
	e := env.StartForTest(t, env.Options{Host: env.HostOptions{Enabled: true}, Members: []string{"member1"}})
	ctx := t.Context()
	r := readReadmeInstall(t)
	service := "karmada-exec-gateway." + r.namespace + ".svc"
	sh := newReadmeShell(t, e, service)
	host, err := e.HostClient()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.CreatePolicy(ctx, env.PropagationPolicy(env.Namespace, "helm-install", e.Members())); err != nil {
		t.Fatal(err)
	}
	sh.mustRun(t, r.secret)
	scrape := startInstalledScrape(t)

	installed := func(t *testing.T, install string) []corev1.Pod {
		t.Helper()
		sh.mustRun(t, install)
		objs, err := waitKarmadaObjects(ctx, e, r.release, "applied", func(objs []string) bool { return len(objs) > 0 })
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"ClusterRole " + r.release, "ClusterRoleBinding " + r.release, "ResourceInterpreterCustomization " + podStatusInterpreter} {
			if !slices.ContainsFunc(objs, func(o string) bool { return strings.HasPrefix(o, want) }) {
				t.Errorf("after %q karmada-apiserver lacks %s; the hook applied %v", install, want, objs)
			}
		}
		if out := sh.mustRun(t, r.hooks); !strings.Contains(out, "gateway-rbac.yaml:") || !strings.Contains(out, "pod-status-interpreter.yaml:") {
			t.Errorf("%q does not print the hook ConfigMap with the karmada-apiserver objects:\n%s", r.hooks, out)
		}
		if out := sh.mustRun(t, r.labeled); !strings.Contains(out, "clusterrole.rbac.authorization.k8s.io/"+r.release+" ") || !strings.Contains(out, "clusterrolebinding.rbac.authorization.k8s.io/"+r.release+" ") {
			t.Errorf("%q does not list the release's ClusterRole and ClusterRoleBinding:\n%s", r.labeled, out)
		}
		pods, names, leader := readyWithLeader(t, e, host, r.namespace, r.release)
		t.Logf("gateway pods %v Ready, labeler leader %s; karmada-apiserver objects %v", names, leader, objs)
		return pods
	}
	uninstalled := func(t *testing.T) {
		t.Helper()
		sh.mustRun(t, r.uninstall)
		if objs, err := waitKarmadaObjects(ctx, e, r.release, "gone", func(objs []string) bool { return len(objs) == 0 }); err != nil {
			t.Fatalf("after %q: %v", r.uninstall, err)
		} else {
			t.Logf("karmada-apiserver objects after uninstall: %v", objs)
		}
	}

	t.Run("passthrough", func(t *testing.T) {
		records := recordsOnHost(t)
		installed(t, r.install+" "+records.values)
		federatedPod(t, e, "helm-passthrough")
		port := portForwardService(t, e, r.namespace, r.release)
		execOnly := gatewayUserKubeconfig(t, e, sh, port, env.UserExecOnly)
		out, err := execThrough(ctx, e, execOnly, "helm-passthrough", "sh", "-c", "echo exec through the installed gateway")
		if err != nil || out != "exec through the installed gateway\n" {
			t.Fatalf("exec as %s through the installed gateway: %q, %v", env.UserExecOnly, out, err)
		}
		t.Logf("exec as %s through svc/%s (port-forward): %q", env.UserExecOnly, r.release, out)
		if out := readmeExecFromOutside(t, e, sh, "helm-passthrough", "echo as the README says"); out != "as the README says\n" {
			t.Errorf("README's exec through the port-forwarded gateway printed %q", out)
		}
		// Without clusters/proxy, passthrough mode cannot reach the member.
		if _, err := execThrough(ctx, e, gatewayUserKubeconfig(t, e, sh, port, env.UserExecKarmadaOnly), "helm-passthrough", "true"); err == nil {
			t.Errorf("%s, without clusters/proxy, exec'd through a passthrough gateway", env.UserExecKarmadaOnly)
		}
		t.Run("leader killed", func(t *testing.T) { assertLeaderFailover(t, e, host, r.namespace, r.release) })
		records.store = readmeRecordingsBucket(t, e, sh, r)
		t.Run("upgrade", func(t *testing.T) { assertRollingUpgrade(t, e, sh, host, r, "helm-passthrough", records) })

		// Passthrough traffic for the dashboard: an exec, and member events
		// the caller may not read.
		pods, err := waitReadyReplicas(ctx, host, r.namespace, r.release, 2)
		if err != nil {
			t.Fatal(err)
		}
		scrape.follow(t, pods)
		port = portForwardService(t, e, r.namespace, r.release)
		for range 2 { // see the authorize mode's traffic
			if _, err := execThrough(ctx, e, gatewayUserKubeconfig(t, e, sh, port, env.UserExecOnly), "helm-passthrough", "true"); err != nil {
				t.Fatal(err)
			}
			scrape.scraped(t)
		}
		eventsUnavailable(t, gatewayUserKubeconfig(t, e, sh, port, env.UserExecKarmadaOnly), "helm-passthrough")
		assertRoutingLogged(t, e, host, r, "helm-passthrough")
		scrape.scraped(t)
		uninstalled(t)
	})

	t.Run("authorize", func(t *testing.T) {
		pods := installed(t, r.install+" "+r.authorize)
		// Authorize-mode traffic for the dashboard: decisions allowed (one
		// from the cache), denied, a labeled pod, streams over the limit.
		scrape.follow(t, pods)
		federatedPod(t, e, "helm-authorize")
		port := portForwardService(t, e, r.namespace, r.release)
		// A labeled series is born at its first increment: scraped once
		// before the next, it shows Prometheus a rate (and the histograms a
		// quantile) instead of a constant.
		for range 2 {
			if _, err := execThrough(ctx, e, gatewayUserKubeconfig(t, e, sh, port, env.UserExecOnly), "helm-authorize", "true"); err != nil {
				t.Fatal(err)
			}
			scrape.scraped(t)
		}
		out, err := execThrough(ctx, e, gatewayUserKubeconfig(t, e, sh, port, env.UserExecKarmadaOnly), "helm-authorize", "sh", "-c", "echo authorized by the installed gateway")
		if err != nil || out != "authorized by the installed gateway\n" {
			t.Fatalf("exec as %s through the installed gateway in authorize mode: %q, %v", env.UserExecKarmadaOnly, out, err)
		}
		if _, err := execThrough(ctx, e, gatewayUserKubeconfig(t, e, sh, port, env.UserNoExec), "helm-authorize", "true"); err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("%s exec'd through the authorize-mode gateway, or failed otherwise than forbidden: %v", env.UserNoExec, err)
		}
		streamsOverLimit(t, gatewayUserKubeconfig(t, e, sh, port, env.UserExecOnly))
		scrape.scraped(t)
		// The installed gateways reach members through the cluster proxy:
		// pods cannot reach the environment's loopback members, so the
		// direct panels are TestMonitoringOnRealPrometheus's.
		t.Run("dashboard", func(t *testing.T) { assertPanelsHaveData(t, scrape.prom, scrape.chart, scrape.start, false) })
		uninstalled(t)
	})

	if t.Failed() {
		return // StartForTest's cleanup prints the logs, then stops
	}
	e.Stop()
	if left := e.Leftovers(); len(left) > 0 {
		t.Errorf("after Stop the host cluster and the members left: %v", left)
	}
}

// Leader election timing of the installed gateway: the defaults of its
// --leader-election-* flags, which the chart does not set.
const (
	leaseDuration = 15 * time.Second
	retryPeriod   = 2 * time.Second
)

// assertLeaderFailover kills the labeler leader's container (SIGKILL, so
// it cannot release the Lease) and force-deletes its pod (so the kubelet
// does not restart it): the other replica must take the Lease once it
// expires (or the Deployment's replacement for the killed pod: whichever
// campaigns first) and label a federated pod created meanwhile, within a lease
// duration plus two retry periods (the last renewal may precede the kill by
// one, the acquisition follow the expiry by one) and 5s for Karmada to
// schedule the binding.
func assertLeaderFailover(t *testing.T, e *env.Env, host kubernetes.Interface, ns, release string) {
	ctx := t.Context()
	_, names, leader := readyWithLeader(t, e, host, ns, release)
	other := names[0]
	if other == leader {
		other = names[1]
	}
	killed := time.Now()
	if err := e.KillContainer(ctx, env.HostCluster, ns, leader, "gateway"); err != nil {
		t.Fatal(err)
	}
	if err := host.CoreV1().Pods(ns).Delete(ctx, leader, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	const pod = "helm-failover"
	federatedPod(t, e, pod)
	budget := leaseDuration + 2*retryPeriod + 5*time.Second
	cs, err := e.KarmadaClient(env.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	var labeled time.Time
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Until(killed.Add(budget)), true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(env.Namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Labels[karmada.ClusterNameLabel] != "" {
			labeled = time.Now()
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		holder, _ := leaseHolder(ctx, e)
		t.Fatalf("pod %s not labeled %s within %s of killing leader %s (Lease holder now %q): %v", pod, karmada.ClusterNameLabel, budget, leader, holder, err)
	}
	holder, err := leaseHolder(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	// The surviving replica usually wins; the Deployment's replacement for
	// the killed pod may too, having campaigned as soon as it started.
	if name, _, _ := strings.Cut(holder, "_"); name == leader || name == "" {
		t.Errorf("after leader %s was killed the Lease is held by %q, want another replica (%s or the killed one's replacement)", leader, holder, other)
	}
	t.Logf("leader %s killed; %s holds the Lease and labeled %s %s after the kill", leader, holder, pod, labeled.Sub(killed).Round(100*time.Millisecond))
	// The Deployment replaces the deleted pod.
	if _, err := waitReadyReplicas(ctx, host, ns, release, 2); err != nil {
		t.Fatal(err)
	}
}

// readyWatch counts the release's Ready gateway pods from a watch, so no
// moment without one goes unseen, and records the lowest count.
type readyWatch struct {
	mu    sync.Mutex
	ready map[string]bool
	min   int
	done  chan struct{}
}

func watchReady(t *testing.T, host kubernetes.Interface, ns, release string) *readyWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/name=karmada-exec-gateway"}
	list, err := host.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	w := &readyWatch{ready: map[string]bool{}, done: make(chan struct{})}
	for _, p := range list.Items {
		w.ready[p.Name] = p.Labels["app.kubernetes.io/component"] == "" && p.DeletionTimestamp == nil && podReady(&p)
	}
	w.min = w.count()
	sel.ResourceVersion = list.ResourceVersion
	watcher, err := host.CoreV1().Pods(ns).Watch(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		for ev := range watcher.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Labels["app.kubernetes.io/component"] != "" {
				continue
			}
			w.mu.Lock()
			// A terminating pod is out of the Service's endpoints: not Ready to callers.
			w.ready[p.Name] = ev.Type != watch.Deleted && p.DeletionTimestamp == nil && podReady(p)
			w.min = min(w.min, w.count())
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); watcher.Stop(); <-w.done })
	return w
}

func (w *readyWatch) count() int {
	n := 0
	for _, r := range w.ready {
		if r {
			n++
		}
	}
	return n
}

func (w *readyWatch) lowest() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.min
}

// hostRecords are where an installed gateway writes its audit logs and
// session recordings: host paths (the host cluster's node is this
// machine), which outlive the pods a rollout replaces, as a PVC would.
type hostRecords struct {
	audit, recordings string
	// values are the helm flags that turn them on, every session recorded,
	// with a grace period short enough to wait out.
	values string
	// store is the store whose bucket the recordings are uploaded to,
	// once README's S3 block ran: the recordings directory is then the
	// replicas' spool.
	store *env.SeaweedFS
}

// recordingsBucket is the bucket the README's S3 block uploads to here.
const recordingsBucket = "recordings"

// readmeRecordingsBucket runs README's "Recordings in an S3 bucket" block
// as written, for a real SeaweedFS on the host's pod network address that
// serves virtual-hosted requests (<bucket>.s3.test), the chart's default
// addressing: the Secret, then the helm upgrade, to which the test adds
// every session recorded (the README records tty sessions; these execs
// have none) and a hostAlias for recordings.s3.test alone, which no DNS
// here serves: a path-style request, to s3.test, would not resolve. It
// waits for the rollout.
func readmeRecordingsBucket(t *testing.T, e *env.Env, sh *readmeShell, r readmeInstall) *env.SeaweedFS {
	t.Helper()
	const domain = "s3.test"
	sw, _, _ := startStore(t, e, env.SeaweedFSOptions{Addr: e.HostBridgeAddress(), Domain: domain, WriterBucket: recordingsBucket})
	lines := readmeCommands(t, "Audit and recordings", "gateway-recordings-s3")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "kubectl -n "+r.namespace+" create secret generic ") || !strings.HasPrefix(lines[1], "helm upgrade "+r.release+" ") {
		t.Fatalf("README's S3 block is not the Secret and the helm upgrade this test reads: %q", lines)
	}
	subst := strings.NewReplacer("<access key ID>", sw.Writer.AccessKeyID, "<secret access key>", sw.Writer.SecretAccessKey,
		"<bucket>", recordingsBucket, "<https://store:port>", sw.DomainEndpoint())
	sh.mustRun(t, subst.Replace(lines[0]))
	aliases := fmt.Sprintf(`[{"ip":%q,"hostnames":[%q]}]`, sw.Addr(), recordingsBucket+"."+domain)
	sh.mustRun(t, subst.Replace(lines[1])+" --set recording.mode=all --set-json 'hostAliases="+aliases+"'")
	sh.mustRun(t, fmt.Sprintf("kubectl -n %s rollout status deployment/%s --timeout=3m", r.namespace, r.release))
	return sw
}

// playableRecordings is a directory holding the recordings named in the
// events of the execs whose command holds command, as the store holds
// them once each is there (and gone from the spool).
func (r hostRecords) playableRecordings(t *testing.T, events []auditv1.Event, command string) string {
	t.Helper()
	names := map[string]bool{}
	for _, evs := range execEvents(events, command) {
		for _, ev := range evs {
			if name := ev.Annotations["gateway.karmada.io/recording"]; name != "" {
				names[name] = true
			}
		}
	}
	var objs map[string]env.StoredObject
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if objs, err = r.store.Objects(ctx, recordingsBucket); err != nil {
			return false, nil
		}
		for name := range names {
			if _, ok := objs[name]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the bucket holds %d objects, not every one of the recordings %v: %v", len(objs), slices.Collect(maps.Keys(names)), err)
	}
	dir := t.TempDir()
	for name := range names {
		writeFile(t, filepath.Join(dir, name), objs[name].Body)
	}
	// Each leaves the spool once its put was answered, a moment after the
	// bucket has it.
	var spooled []string
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		spooled = nil
		for name := range names {
			if _, err := os.Stat(filepath.Join(r.recordings, name)); err == nil {
				spooled = append(spooled, name)
			}
		}
		return len(spooled) == 0, nil
	})
	if err != nil {
		t.Errorf("%v are in the bucket and still in the spool", spooled)
	}
	return dir
}

// recordingGrace is the installed gateway's --shutdown-grace-period
// (shutdownGracePeriodSeconds) in the Helm test.
const recordingGrace = 10 * time.Second

func recordsOnHost(t *testing.T) hostRecords {
	t.Helper()
	dir := t.TempDir()
	r := hostRecords{audit: filepath.Join(dir, "audit"), recordings: filepath.Join(dir, "recordings")}
	for _, d := range []string{r.audit, r.recordings} {
		// The gateway runs as distroless' nonroot user.
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 65532, 65532); err != nil {
			t.Fatal(err)
		}
	}
	volume := func(path string) string {
		return fmt.Sprintf(`{"hostPath":{"path":%q,"type":"Directory"}}`, path)
	}
	r.values = fmt.Sprintf("--set audit.log.enabled=true --set-json '%s' --set recording.mode=all --set-json '%s' --set shutdownGracePeriodSeconds=%d",
		"audit.log.volume="+volume(r.audit), "recording.volume="+volume(r.recordings), int(recordingGrace.Seconds()))
	return r
}

// assertRollingUpgrade runs README's helm upgrade (a changed value) with
// four recorded exec sessions open through the gateway, and watches the
// rollout: never fewer than one Ready replica (the PDB's minAvailable; the
// Deployment surges before it removes one), both pods replaced. Two
// sessions, released once every old pod got its SIGTERM, end with their
// own exit status: the old pod drained them instead of cutting them. Two
// never end: the old pod ends them when its grace period is over, with a
// Failure saying so. Every session has both audit stages, in the old
// pod's own audit log (audit-<pod>.log), and a recording that plays: in
// the bucket, and no longer in the spool.
func assertRollingUpgrade(t *testing.T, e *env.Env, sh *readmeShell, host kubernetes.Interface, r readmeInstall, pod string, records hostRecords) {
	ctx := t.Context()
	before, err := waitReadyReplicas(ctx, host, r.namespace, r.release, 2)
	if err != nil {
		t.Fatal(err)
	}
	member, err := e.PodClusters(ctx, env.Namespace, pod)
	if err != nil || len(member) != 1 {
		t.Fatalf("clusters of %s: %v, %v", pod, member, err)
	}
	port := portForwardService(t, e, r.namespace, r.release)
	const sessions, drained = 4, 2
	release := func(i int) string { return fmt.Sprintf("/tmp/release-upgrade-%d", i) }
	var open []*kubectlProc
	for i := range sessions {
		session := startEnvKubectl(t, e, gatewayUserKubeconfig(t, e, sh, port, env.UserExecOnly), nil, "exec", pod, "--", "sh", "-c",
			fmt.Sprintf("echo session open %d; while [ ! -e %s ]; do sleep 0.1; done; echo drained; exit 7", i, release(i)))
		if err := session.waitOutput(ctx, "session open", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		open = append(open, session)
	}
	ready := watchReady(t, host, r.namespace, r.release)
	old := map[string]bool{before[0].Name: true, before[1].Name: true}
	carrier := sessionsCarrier(t, records, old, pod, sessions)

	sh.mustRun(t, r.upgrade)
	// The pod carrying the sessions gets its SIGTERM (deletionTimestamp) and
	// stays, draining them. It may be the first old pod to go: the other
	// one's SIGTERM waits for a second new pod to be Ready, which on a
	// loaded machine took longer than the grace period, so the sessions
	// are released on the carrier's own SIGTERM.
	var sigterm time.Time
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := host.CoreV1().Pods(r.namespace).Get(ctx, carrier, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp == nil {
			return false, nil
		}
		sigterm = time.Now()
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s, carrying the sessions, was not terminated after %q: %v", carrier, r.upgrade, err)
	}
	for i := range drained {
		if _, err := e.MemberExec(ctx, member[0], env.Namespace, pod, "main", "touch", release(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, session := range open {
		err := session.wait(recordingGrace + 30*time.Second)
		switch {
		case i < drained && (exitCode(err) != 7 || !strings.Contains(session.stdout.String(), "drained")):
			t.Fatalf("exec session %d, released inside the grace period, ended with %v (exit %d), stdout %q, stderr %q; want exit 7 after \"drained\"",
				i, err, exitCode(err), session.stdout.String(), session.stderr.String())
		case i >= drained && (err == nil || !strings.Contains(session.stderr.String(), "the gateway ended the stream: it is shutting down")):
			t.Errorf("exec session %d, open past the grace period, ended with %v, stderr %q; want the gateway's Failure", i, err, session.stderr.String())
		}
	}
	t.Logf("sessions drained or ended %s after %s's SIGTERM", time.Since(sigterm).Round(100*time.Millisecond), carrier)
	after, err := waitReadyReplicas(ctx, host, r.namespace, r.release, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range after {
		if old[p.Name] {
			t.Errorf("pod %s of the old release is still Ready after the upgrade", p.Name)
		}
	}
	if n := ready.lowest(); n < 1 {
		t.Errorf("the rollout left %d Ready gateway pods at one point; the PDB and maxUnavailable 0 keep at least 1", n)
	}
	t.Logf("rollout: fewest Ready pods seen %d; now %s, %s", ready.lowest(), after[0].Name, after[1].Name)

	// The carrier writes the cut sessions' last audit events after their
	// clients got the Failure, and drains its sinks before it exits: read
	// its log once it is gone (within its terminationGracePeriodSeconds).
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := host.CoreV1().Pods(r.namespace).Get(ctx, carrier, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("%s, which carried the sessions, is still there after its grace period", carrier)
	}
	player, err := exec.LookPath("asciinema")
	if err != nil {
		t.Fatal("asciinema is not installed: run make tools")
	}
	var events []auditv1.Event
	for name := range old {
		events = append(events, readAuditLog(t, filepath.Join(records.audit, "audit-"+name+".log"))...)
	}
	const command = "/tmp/release-upgrade-"
	sessionRecords{command: command, output: "session open", exit: "7", n: sessions,
		ends: map[string]int{"completed": drained, "gateway_shutdown": sessions - drained}}.check(t, player, events, records.playableRecordings(t, events, command))
}

// sessionsCarrier is the gateway pod of old whose audit log has the
// ResponseStarted events of n exec sessions into pod: the one a
// port-forward to the Service picked.
func sessionsCarrier(t *testing.T, records hostRecords, old map[string]bool, pod string, n int) string {
	t.Helper()
	var carrier string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for name := range old {
			b, err := os.ReadFile(filepath.Join(records.audit, "audit-"+name+".log"))
			if err != nil {
				continue
			}
			started := 0
			for line := range bytes.SplitSeq(b, []byte("\n")) {
				var ev auditv1.Event
				if json.Unmarshal(line, &ev) == nil && ev.Stage == auditv1.StageResponseStarted &&
					ev.ObjectRef != nil && ev.ObjectRef.Name == pod && ev.ObjectRef.Subresource == "exec" {
					started++
				}
			}
			if started >= n {
				carrier = name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no gateway pod of %v audited the %d sessions into %s: %v", slices.Collect(maps.Keys(old)), n, pod, err)
	}
	return carrier
}

// installedScrape is Debian's Prometheus scraping the installed gateway's
// pods with a job equivalent to the chart's ServiceMonitor, their targets
// in a file it watches (Kubernetes discovery's stand-in: the pods' IPs,
// which the host reaches on their bridge, and the ServiceMonitor's port).
type installedScrape struct {
	prom    *monitoring.Prometheus
	chart   *monitoring.Chart
	targets string
	start   time.Time
}

func startInstalledScrape(t *testing.T) *installedScrape {
	t.Helper()
	chart := monitoring.RenderChart(t)
	dir := t.TempDir()
	s := &installedScrape{chart: chart, targets: filepath.Join(dir, "targets.json")}
	if err := chart.WriteTargets(s.targets, nil); err != nil {
		t.Fatal(err)
	}
	config, err := chart.PrometheusConfig(monitoring.ScrapeOptions{TargetsFile: s.targets, Interval: scrapeInterval})
	if err != nil {
		t.Fatal(err)
	}
	if s.prom, err = monitoring.StartPrometheus(t.Context(), monitoring.Binary(t, "prometheus"), dir, config); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.prom.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.prom.LogTail())
		}
	})
	s.start = time.Now()
	return s
}

// follow points the scrape at pods' metrics ports and waits until each was
// scraped twice: counters then have a sample before the traffic to come.
func (s *installedScrape) follow(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	var targets []monitoring.ScrapeTarget
	for _, p := range pods {
		port := 0
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == "metrics" {
					port = int(cp.ContainerPort)
				}
			}
		}
		if port == 0 || p.Status.PodIP == "" {
			t.Fatalf("pod %s has no metrics port or no IP", p.Name)
		}
		targets = append(targets, monitoring.ScrapeTarget{Addr: fmt.Sprintf("%s:%d", p.Status.PodIP, port), Pod: p.Name})
	}
	if err := s.chart.WriteTargets(s.targets, targets); err != nil {
		t.Fatal(err)
	}
	// Until Prometheus has read the file, the previous pods (draining after
	// their SIGTERM, still serving) are its targets: wait for these alone.
	want := make([]string, 0, len(targets))
	for _, tg := range targets {
		want = append(want, tg.Addr)
	}
	slices.Sort(want)
	var active []string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		res, err := s.prom.API.Targets(ctx)
		if err != nil {
			return false, nil
		}
		active = active[:0]
		for _, at := range res.Active {
			if string(at.Labels["job"]) == s.chart.MetricsService {
				active = append(active, string(at.Labels["instance"]))
			}
		}
		slices.Sort(active)
		return slices.Equal(active, want), nil
	})
	if err != nil {
		t.Fatalf("prometheus' targets are %v, want %v: %v", active, want, err)
	}
	s.scraped(t)
}

// scraped waits until every target was scraped twice from now on.
func (s *installedScrape) scraped(t *testing.T) {
	t.Helper()
	if err := s.prom.WaitScrapedAfter(t.Context(), s.chart.MetricsService, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
}

// eventsUnavailable lists a pod's events through the gateway as a user who
// may read karmada-apiserver's events but not the member's (passthrough
// mode): the member part is reported unavailable.
func eventsUnavailable(t *testing.T, kubeconfig, pod string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rec := &warningRecorder{}
	cfg.WarningHandler = rec
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Events(env.Namespace).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod}); err != nil {
		t.Fatalf("list events: %v", err)
	}
	if !strings.Contains(rec.String(), "unavailable") {
		t.Fatalf("events list through the installed gateway: no Warning that the member's events are unavailable (%q)", rec.String())
	}
}

// streamsOverLimit opens the per-client stream limit's worth of pod
// watches with one token (the chart leaves the gateway's default
// --max-streams-per-client, 200), then one more, which must get 429.
func streamsOverLimit(t *testing.T, kubeconfig string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	watchesThenRefused(t, client, cfg.Host, 200)
}

// assertRoutingLogged: after README's upgrade to logVerbosity=4 (-v=4),
// the gateway logs a line naming the member for the exec it routed, as the
// README's flag table says.
func assertRoutingLogged(t *testing.T, e *env.Env, host kubernetes.Interface, r readmeInstall, pod string) {
	t.Helper()
	if !strings.Contains(r.upgrade, "--set logVerbosity=4") {
		t.Fatalf("README's upgrade line %q no longer sets logVerbosity=4, which this test checks the routing lines of", r.upgrade)
	}
	clusters, err := e.PodClusters(t.Context(), env.Namespace, pod)
	if err != nil || len(clusters) != 1 {
		t.Fatalf("clusters of %s: %v, %v", pod, clusters, err)
	}
	want := []string{`"Rewriting to the member cluster"`, `pod="` + pod + `"`, `cluster="` + clusters[0] + `"`}
	pods, err := gatewayPods(t.Context(), host, r.namespace, r.release)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	for _, p := range pods {
		b, err := host.CoreV1().Pods(r.namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "gateway"}).DoRaw(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		logs.Write(b)
	}
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(line, w) }) {
			return
		}
	}
	t.Errorf("no line with %q in the gateway pods' logs at logVerbosity=4:\n%s", want, logs.String())
}

// readmeExecFromOutside runs README's port-forward, kubectl config and exec
// lines ("Point executors at the gateway") as written, substituting what a
// user does: a free local port for 8443 (the machine is shared), and the
// pod, its namespace and a command for the placeholders. It returns the
// exec's output.
func readmeExecFromOutside(t *testing.T, e *env.Env, sh *readmeShell, pod, command string) string {
	t.Helper()
	lines := readmeCommands(t, "Point executors at the gateway", " port-forward ")
	if len(lines) != 4 || !strings.Contains(lines[0], " port-forward ") || !strings.Contains(lines[0], " 8443:443") || !strings.Contains(lines[1], "https://127.0.0.1:8443") || !strings.Contains(lines[3], " exec <pod> ") {
		t.Fatalf("README's port-forward block is not port-forward, set-cluster, set-context, exec as this test reads it: %q", lines)
	}
	args := strings.Fields(strings.Replace(strings.TrimPrefix(lines[0], "kubectl "), " 8443:443", " :443", 1))
	pf := startEnvKubectl(t, e, filepath.Join(sh.dir, ".kube", "config"), nil, args...)
	if err := pf.waitOutput(t.Context(), "Forwarding from 127.0.0.1:", time.Minute); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) `).FindStringSubmatch(pf.stdout.String())
	if m == nil {
		t.Fatalf("no port in kubectl port-forward's output %q", pf.stdout.String())
	}
	sh.mustRun(t, strings.Replace(lines[1], "127.0.0.1:8443", "127.0.0.1:"+m[1], 1))
	sh.mustRun(t, lines[2])
	out := sh.mustRun(t, strings.NewReplacer("<namespace>", env.Namespace, "<pod>", pod, "<command>", command).Replace(lines[3]))
	readmePinnedContexts(t, e, sh, m[1], pod, command, out)
	return out
}

// readmeCommands are the command lines (comments left out) of the sh
// blocks of README's section title that have a line containing marker.
func readmeCommands(t *testing.T, title, marker string) []string {
	t.Helper()
	var lines []string
	for _, b := range helmtest.ReadmeShBlocks(t, title) {
		if slices.ContainsFunc(b, func(l string) bool { return strings.Contains(l, marker) }) {
			lines = append(lines, slices.DeleteFunc(slices.Clone(b), func(l string) bool { return strings.HasPrefix(l, "#") })...)
		}
	}
	return lines
}

// readmePinnedContexts runs README's per-member contexts (the block with
// /clusters/<member>) as written for every member, through the
// port-forward on port: the exec runs in the member that has pod and
// prints what the unpinned one printed; every other member answers that
// the pod is not placed there, naming where it is; a name that is no
// member of Karmada's fails at kubectl's discovery, which the gateway
// answers 404 as it answers every route under that name.
func readmePinnedContexts(t *testing.T, e *env.Env, sh *readmeShell, port, pod, command, want string) {
	t.Helper()
	lines := readmeCommands(t, "Point executors at the gateway", "/clusters/<member>")
	if len(lines) != 3 || !strings.Contains(lines[0], "https://127.0.0.1:8443/clusters/<member>") || !strings.Contains(lines[2], " exec <pod> ") {
		t.Fatalf("README's per-member block is not set-cluster, set-context, exec as this test reads it: %q", lines)
	}
	placed, err := e.PodClusters(t.Context(), env.Namespace, pod)
	if err != nil || len(placed) != 1 {
		t.Fatalf("clusters of %s: %v, %v", pod, placed, err)
	}
	// The Helm test's environment may have one member: a Cluster name
	// Karmada does not know is refused too.
	const unknown = "no-such-member"
	for _, member := range append(e.Members(), unknown) {
		r := strings.NewReplacer("<member>", member, "127.0.0.1:8443", "127.0.0.1:"+port, "<namespace>", env.Namespace, "<pod>", pod, "<command>", command)
		sh.mustRun(t, r.Replace(lines[0]))
		sh.mustRun(t, r.Replace(lines[1]))
		out, err := sh.run(t.Context(), r.Replace(lines[2]))
		switch {
		case member == placed[0] && (err != nil || out != want):
			t.Errorf("README's exec pinned to %s, where %s runs: %q, %v; want %q", member, pod, out, err, want)
		case member == unknown:
			if err == nil || !strings.Contains(out, "could not find the requested resource") {
				t.Errorf("README's exec pinned to %s, a cluster Karmada does not have: %q, %v; want discovery's 404", member, out, err)
			}
		case member != placed[0] && (err == nil || !strings.Contains(out, fmt.Sprintf("is not placed on member cluster %q", member)) || !strings.Contains(out, "Karmada placed it on "+placed[0])):
			t.Errorf("README's exec pinned to %s, where %s does not run: %q, %v; want the 404 naming %s", member, pod, out, err, placed[0])
		}
	}
}
