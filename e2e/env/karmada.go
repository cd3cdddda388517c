package env

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
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

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// The Karmada binaries, as hack/build-karmada.sh names them in KarmadaBinDir.
const (
	karmadaAggregatedAPIServer = "aggregated-apiserver"
	karmadaControllerManager   = "controller-manager"
	karmadaScheduler           = "scheduler"
	karmadaWebhook             = "webhook"
)

// aggregatedService is the Service of Karmada's APIService manifest; the
// aggregator verifies the aggregated apiserver's certificate for
// <service>.<namespace>.svc.
const aggregatedService = "karmada-aggregated-apiserver"

const apiServiceName = "v1alpha1.cluster.karmada.io"

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// karmadaProcesses are the Karmada control-plane processes besides
// karmada-apiserver, in start order.
type karmadaProcesses struct {
	aggregated, webhook, kcm, controllerManager, scheduler *process
}

func (k *karmadaProcesses) all() []*process {
	return slices.DeleteFunc([]*process{k.scheduler, k.controllerManager, k.kcm, k.webhook, k.aggregated}, func(p *process) bool { return p == nil })
}

// karmadaBinary is the path of one of Karmada's binaries.
func (e *Env) karmadaBinary(name string) string {
	return filepath.Join(e.opts.KarmadaBinDir, name)
}

// KarmadaCommit is the Karmada commit or release tag the binaries were
// built from (KarmadaBinDir/COMMIT, written by hack/build-karmada.sh), so
// reports can say which Karmada they measured; "unknown" when the stamp is
// missing.
func (e *Env) KarmadaCommit() string {
	b, err := os.ReadFile(filepath.Join(e.opts.KarmadaBinDir, "COMMIT"))
	if c := strings.TrimSpace(string(b)); err == nil && c != "" {
		return c
	}
	return "unknown"
}

// checkKarmadaStamps refuses Karmada binaries and a source tree built from
// different commits or releases (hack/build-karmada.sh stamps both with a
// COMMIT file): the CRDs and manifests of one Karmada under the binaries of
// another would test neither. A missing stamp (a tree given by hand) is not
// checked.
func checkKarmadaStamps(binDir, srcDir string) error {
	bin, errBin := os.ReadFile(filepath.Join(binDir, "COMMIT"))
	src, errSrc := os.ReadFile(filepath.Join(srcDir, "COMMIT"))
	if errBin != nil || errSrc != nil {
		return nil
	}
	if b, s := strings.TrimSpace(string(bin)), strings.TrimSpace(string(src)); b != s {
		return fmt.Errorf("the Karmada binaries in %s are %s but the source in %s is %s: "+
			"set E2E_KARMADA_VERSION (or E2E_KARMADA_BIN_DIR and E2E_KARMADA_SRC) to one Karmada", binDir, b, srcDir, s)
	}
	return nil
}

// startKarmada runs Karmada's control plane against karmada-apiserver as
// Karmada's own installers lay it out: the aggregated apiserver behind an
// APIService and an ExternalName Service, the webhook (without which
// bindings get no permanent-id and status never aggregates), the
// controller-manager, the scheduler, and kube-controller-manager for garbage
// collection (deleting a pod template deletes its binding and Works). Then
// it joins every member in Push mode as `karmadactl join` does.
func (e *Env) startKarmada(ctx context.Context) error {
	if err := e.startAggregatedAPIServer(ctx); err != nil {
		return err
	}
	if err := e.startWebhook(ctx); err != nil {
		return err
	}
	kubeconfig := e.Kubeconfig(UserAdmin)
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	kcmPort, cmHealth, schedHealth := ports[0], ports[1], ports[2]
	k := &e.karmadaProcs
	k.kcm = e.newProcess("kube-controller-manager", filepath.Join(e.opts.BinDir, "kube-controller-manager"),
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(kcmPort),
		"--controllers=garbage-collector-controller,namespace-controller",
		"--leader-elect=false",
		"--v=1",
	)
	k.controllerManager = e.newProcess("karmada-controller-manager", e.karmadaBinary(karmadaControllerManager),
		"--kubeconfig="+kubeconfig,
		// The Karmada default is 10s; shorter keeps a member outage and
		// its recovery visible within a test's patience.
		"--cluster-status-update-frequency="+clusterStatusUpdateFrequency.String(),
		// Karmada waits 30s by default before it calls a member that
		// stopped answering unhealthy.
		"--cluster-failure-threshold=6s",
		"--controllers=*,hpaScaleTargetMarker,deploymentReplicasSyncer",
		"--leader-elect=false",
		"--metrics-bind-address=0",
		"--health-probe-bind-address="+hostPort(cmHealth),
		"--v=2",
	)
	if len(e.opts.PullMembers) > 0 {
		// A Pull member's health is its agent's lease (clusterLeaseDuration);
		// Push members' is probed by the controller-manager itself.
		k.controllerManager.args = append(k.controllerManager.args,
			"--cluster-monitor-grace-period="+clusterMonitorGracePeriod.String())
	}
	k.scheduler = e.newProcess("karmada-scheduler", e.karmadaBinary(karmadaScheduler),
		"--kubeconfig="+kubeconfig,
		"--enable-scheduler-estimator=false",
		"--leader-elect=false",
		"--metrics-bind-address=0",
		"--health-probe-bind-address="+hostPort(schedHealth),
		"--v=2",
	)
	for _, p := range []*process{k.kcm, k.controllerManager, k.scheduler} {
		if err := p.start(); err != nil {
			return err
		}
	}
	for p, port := range map[*process]int{k.controllerManager: cmHealth, k.scheduler: schedHealth} {
		if err := e.waitHTTP(ctx, p, "http://"+hostPort(port)+"/healthz", "", 60*time.Second); err != nil {
			return err
		}
	}
	return e.joinMembers(ctx)
}

// newProcess is a child process logging to logs/<name>.log.
func (e *Env) newProcess(name, path string, args ...string) *process {
	return &process{name: name, path: path, args: args, env: e.componentEnv(), logPath: filepath.Join(e.logDir, name+".log")}
}

// componentEnv is what a component's environment adds to the test's.
// GOMAXPROCS=1: an environment is a score of Go processes, mostly idle,
// on a machine of two or a few cores that several environments share.
// With one P a process wakes no second thread to spin for work each time
// a timer fires or a request comes, which costs a VM's kernel more than
// the work: an idle environment took 13% less CPU (18.2 core-seconds in
// 90 s, not 21), and the e2e suite on two cores 10% less (1,096 and 999
// busy core-seconds against 1,221 and 1,107, runs taken in turns), its
// processes queueing for the same two cores either way.
func (e *Env) componentEnv() []string {
	if e.opts.ComponentsOnEveryCPU {
		return nil
	}
	return []string{"GOMAXPROCS=1"}
}

// freePorts is freePort n times.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// clusterStatusUpdateFrequency is how often karmada-controller-manager
// probes each member.
const clusterStatusUpdateFrequency = 3 * time.Second

func (e *Env) startAggregatedAPIServer(ctx context.Context) error {
	serving, err := e.ca.issue(e.pkiDir, "karmada-aggregated-apiserver", aggregatedService, nil, append(slices.Clone(loopbackHosts),
		aggregatedService+"."+KarmadaSystem+".svc",
		aggregatedService+"."+KarmadaSystem+".svc.cluster.local"))
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	kubeconfig := e.Kubeconfig(UserAdmin)
	e.karmadaProcs.aggregated = e.newProcess("karmada-aggregated-apiserver", e.karmadaBinary(karmadaAggregatedAPIServer),
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--etcd-servers="+e.etcdURL,
		// Karmada shares karmada-apiserver's etcd prefix.
		"--etcd-prefix=/"+KarmadaName,
		"--tls-cert-file="+serving.CertFile,
		"--tls-private-key-file="+serving.KeyFile,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--v=1",
	)
	if err := e.karmadaProcs.aggregated.start(); err != nil {
		return err
	}
	if err := e.waitHTTP(ctx, e.karmadaProcs.aggregated, "https://"+hostPort(port)+"/readyz", e.tokens[UserAdmin], 60*time.Second); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	// Karmada's installers point the APIService at an ExternalName Service;
	// here it resolves to localhost on the aggregated apiserver's port.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: aggregatedService, Namespace: KarmadaSystem},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Port: int32(port)}},
		},
	}
	if err := create(ctx, cs.CoreV1().Services(KarmadaSystem).Create, svc); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	apiService, err := e.karmadaManifest(filepath.Join("artifacts", "deploy", "karmada-aggregated-apiserver-apiservice.yaml"), "APIService", nil)
	if err != nil {
		return err
	}
	if err := unstructured.SetNestedField(apiService.Object, int64(port), "spec", "service", "port"); err != nil {
		return err
	}
	if _, err := dyn.Resource(apiServiceGVR).Create(ctx, apiService, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create APIService: %w", err)
	}
	return e.waitAPIServiceAvailable(ctx, dyn)
}

// waitAPIServiceAvailable waits until kube-aggregator reports the
// APIService Available: it reached the aggregated apiserver through the
// Service with its front-proxy certificate.
func (e *Env) waitAPIServiceAvailable(ctx context.Context, dyn dynamic.Interface) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if !e.karmadaProcs.aggregated.running() {
			return false, e.karmadaProcs.aggregated.exitErr()
		}
		obj, err := dyn.Resource(apiServiceGVR).Get(ctx, apiServiceName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				if m["status"] == "True" {
					return true, nil
				}
				last = fmt.Sprint(m["reason"], ": ", m["message"])
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s never became Available (last: %s): %w", apiServiceName, last, err)
	}
	return nil
}

func (e *Env) startWebhook(ctx context.Context) error {
	certDir := filepath.Join(e.pkiDir, "karmada-webhook")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return err
	}
	serving, err := e.ca.issue(certDir, "tls", "karmada-webhook", nil, loopbackHosts)
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	e.karmadaProcs.webhook = e.newProcess("karmada-webhook", e.karmadaBinary(karmadaWebhook),
		"--kubeconfig="+e.Kubeconfig(UserAdmin),
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+certDir,
		"--tls-cert-file-name="+filepath.Base(serving.CertFile),
		"--tls-private-key-file-name="+filepath.Base(serving.KeyFile),
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--v=1",
	)
	if err := e.karmadaProcs.webhook.start(); err != nil {
		return err
	}
	// Karmada's webhook serves its readiness on the webhook port itself:
	// waiting for it keeps the first PropagationPolicy create from failing
	// on a webhook not listening yet.
	if err := e.waitHTTP(ctx, e.karmadaProcs.webhook, "https://localhost:"+strconv.Itoa(port)+"/readyz/", "", 60*time.Second); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	// Karmada's manifest names the in-cluster Service; here the webhook
	// listens on localhost.
	replace := strings.NewReplacer("karmada-webhook.karmada-system.svc:443", "localhost:"+strconv.Itoa(port))
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		obj, err := e.karmadaManifest(filepath.Join("artifacts", "deploy", "webhook-configuration.yaml"), kind, replace)
		if err != nil {
			return err
		}
		gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: strings.ToLower(kind) + "s"}
		if _, err := dyn.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s: %w", kind, err)
		}
	}
	return nil
}

// karmadaManifest reads the object of kind from one of Karmada's manifests
// in its source tree, with {{caBundle}} filled with the environment's CA and
// replace (if any) applied to the text first.
func (e *Env) karmadaManifest(rel, kind string, replace *strings.Replacer) (*unstructured.Unstructured, error) {
	path := filepath.Join(e.opts.KarmadaSrcDir, rel)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read Karmada manifest: %w", err)
	}
	text := strings.ReplaceAll(string(data), "{{caBundle}}", base64.StdEncoding.EncodeToString(e.CAPEM()))
	if replace != nil {
		text = replace.Replace(text)
	}
	for _, doc := range splitYAML([]byte(text)) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		if u := (&unstructured.Unstructured{Object: obj}); u.GetKind() == kind {
			return u, nil
		}
	}
	return nil, fmt.Errorf("no %s in %s", kind, path)
}

// Names `karmadactl join` gives in a member (pkg/karmadactl/join,
// pkg/util/names).
const (
	memberImpersonatorSA = "karmada-impersonator"
	// memberTokenLifetime outlives any run; members run no token cleaner.
	memberTokenLifetime = 7 * 24 * time.Hour
)

func memberControlSA(member string) string { return "karmada-" + member }

// ImpersonatorSecret names the karmada-apiserver Secret holding the token
// the cluster proxy forwards to member with (Cluster spec.impersonatorSecretRef).
func ImpersonatorSecret(member string) string { return member + "-impersonator" }

// joinMembers registers every member in Push mode, as `karmadactl join`
// does: in the member, namespace karmada-cluster with a ServiceAccount
// Karmada controls the member as (allowed everything) and the impersonator
// ServiceAccount (allowed nothing yet: Karmada's unified-auth controller
// grants it the impersonation of exactly the users and groups bound to
// clusters/proxy in karmada-apiserver); in karmada-apiserver, their
// TokenRequest tokens as Secrets and the Cluster object.
func (e *Env) joinMembers(ctx context.Context) error {
	for _, m := range e.opts.Members {
		join := e.joinMember
		if e.isPull(m) {
			join = e.registerPullMember
		}
		if err := join(ctx, m); err != nil {
			return fmt.Errorf("join %s: %w", m, err)
		}
	}
	for _, m := range e.opts.Members {
		if err := e.WaitClusterReady(ctx, m); err != nil {
			return err
		}
		if e.isPull(m) {
			if err := e.afterPullRegistered(ctx, m); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *Env) joinMember(ctx context.Context, member string) error {
	mcs, err := kubernetes.NewForConfig(e.MemberConfig(member))
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KarmadaCluster, Labels: map[string]string{"karmada.io/system": "true"}}}
	if err := create(ctx, mcs.CoreV1().Namespaces().Create, ns); err != nil {
		return err
	}
	for _, sa := range []string{memberControlSA(member), memberImpersonatorSA} {
		obj := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: KarmadaCluster}}
		if err := create(ctx, mcs.CoreV1().ServiceAccounts(KarmadaCluster).Create, obj); err != nil {
			return err
		}
	}
	control := "karmada-controller-manager:" + memberControlSA(member)
	if err := applyRBAC(ctx, mcs, []rbacObject{
		clusterRole(control,
			rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}},
			rbacv1.PolicyRule{NonResourceURLs: []string{"*"}, Verbs: []string{"get"}},
		),
		clusterRoleBindingTo(control, control, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: memberControlSA(member), Namespace: KarmadaCluster}),
	}); err != nil {
		return err
	}
	controlToken, err := requestToken(ctx, mcs, memberControlSA(member))
	if err != nil {
		return err
	}
	impersonatorToken, err := requestToken(ctx, mcs, memberImpersonatorSA)
	if err != nil {
		return err
	}
	e.tokens[ImpersonatorUser(member)] = impersonatorToken
	kubeSystem, err := mcs.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read %s's cluster id: %w", member, err)
	}

	kcs, err := kubernetes.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	secrets := []*corev1.Secret{
		{
			ObjectMeta: metav1.ObjectMeta{Name: member, Namespace: KarmadaCluster},
			Data:       map[string][]byte{"caBundle": e.CAPEM(), "token": []byte(controlToken)},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: ImpersonatorSecret(member), Namespace: KarmadaCluster},
			Data:       map[string][]byte{"token": []byte(impersonatorToken)},
		},
	}
	for _, s := range secrets {
		if err := create(ctx, kcs.CoreV1().Secrets(KarmadaCluster).Create, s); err != nil {
			return err
		}
	}
	dyn, err := dynamic.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	cluster := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": karmada.ClusterGVR.GroupVersion().String(),
		"kind":       "Cluster",
		"metadata":   map[string]any{"name": member},
		"spec": map[string]any{
			"id":                    string(kubeSystem.UID),
			"syncMode":              "Push",
			"apiEndpoint":           e.MemberURL(member),
			"secretRef":             map[string]any{"namespace": KarmadaCluster, "name": member},
			"impersonatorSecretRef": map[string]any{"namespace": KarmadaCluster, "name": ImpersonatorSecret(member)},
		},
	}}
	if _, err := dyn.Resource(karmada.ClusterGVR).Create(ctx, cluster, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Cluster %s: %w", member, err)
	}
	return nil
}

func requestToken(ctx context.Context, cs kubernetes.Interface, sa string) (string, error) {
	seconds := int64(memberTokenLifetime.Seconds())
	tr, err := cs.CoreV1().ServiceAccounts(KarmadaCluster).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request a token for %s/%s: %w", KarmadaCluster, sa, err)
	}
	return tr.Status.Token, nil
}

// crdFiles lists the CRD manifests under dir, recursively (Karmada's chart
// keeps them in one folder per API group).
func crdFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".yaml") && filepath.Base(path) != "kustomization.yaml" {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}
