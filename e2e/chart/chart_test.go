package chart

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/audit"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/recording"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/upload"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	fullname   = "gw-karmada-exec-gateway"
	memberName = fullname + "-member"
)

// Value sets every structural test renders; lint runs on all of them too.
var valueSets = map[string]string{
	"defaults": ``,
	"authorize": `
auth: {mode: authorize, cacheTTL: 30s, clientCA: {secretName: client-ca, key: bundle.pem}}
karmada:
  kubeconfigSecret: {name: gateway-kubeconfig, key: config}
  identity: {user: "", serviceAccount: {name: exec-gateway, namespace: karmada-system}}
`,
	"insecure-single-no-labeler": `
replicas: 1
tls: {source: none}
labeler: {enabled: false}
`,
	"cert-manager-monitoring": `
tls: {source: certManager, certManager: {issuerRef: {name: ca-issuer, kind: ClusterIssuer}, dnsNames: ["gateway.example.com"]}}
monitoring:
  serviceMonitor: {enabled: true, labels: {release: kube-prometheus}}
  prometheusRule: {enabled: true}
  grafanaDashboard: {enabled: true, namespace: monitoring}
`,
	"karmada-apiserver-target": `
target: karmadaApiserver
auth: {mode: authorize}
`,
	"passthrough-executors": `
passthrough:
  executors:
  - {namespace: ci, serviceAccount: gitlab-runner}
  - {user: "ci: bot #1", groups: ["a'b\"c", "*"]}
executorPolicy: {namespaces: [ci], clusterAffinity: {clusterNames: [member1]}}
`,
	"recordings-bucket": `
recording:
  mode: all
  s3: {bucket: rec, endpoint: "https://s3.example:9000", prefix: "prod/", credentialsSecret: {name: s3-keys}, caSecret: {name: s3-ca}}
audit: {log: {enabled: true}}
hostAliases: [{ip: 10.0.0.9, hostnames: [rec.s3.example]}]
`,
	// Strings that would break YAML if a template forgot to quote them.
	"awkward-strings": `
karmada:
  identity: {user: "system:serviceaccount:ci: #tricky", groups: ["*", "a'b\"c"]}
extraArgs: ["--kube-api-qps=100", "--flag=a: b # not a comment", "-v=2"]
podAnnotations: {"example.com/note": "value: with colon", "x": "{not: a map}"}
service: {annotations: {"a": "- not a list"}}
auth: {mode: authorize}
tls: {source: certManager, certManager: {issuerRef: {name: iss}, dnsNames: ["*.example.com"]}}
`,
}

func TestLint(t *testing.T) {
	for name, v := range valueSets {
		t.Run(name, func(t *testing.T) {
			out, stderr, err := runHelm(t, "lint", chartDir, "--strict", "--kube-version", kubeVersion,
				"--namespace", "karmada-system", "--values", valuesFile(t, v))
			if err != nil {
				t.Fatalf("helm lint: %v\n%s\n%s", err, out, stderr)
			}
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint did not report success:\n%s", out)
			}
		})
	}
}

func TestEveryValueSetRendersValidObjects(t *testing.T) {
	for name, v := range valueSets {
		t.Run(name, func(t *testing.T) {
			objs := render(t, v)
			if len(objs) == 0 {
				t.Fatal("nothing rendered")
			}
			for _, cm := range objs.find("ConfigMap", "") {
				data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
				for k, s := range data {
					if strings.HasSuffix(k, ".yaml") {
						decodeAll(t, s)
					}
					if strings.HasSuffix(k, ".json") && !json.Valid([]byte(s)) {
						t.Errorf("ConfigMap %s key %s is not valid JSON", cm.GetName(), k)
					}
				}
			}
		})
	}
}

func deployment(t *testing.T, objs objects) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	convert(t, objs.one(t, "Deployment", fullname).Object, &d)
	return &d
}

func TestDeploymentDefaults(t *testing.T) {
	objs := render(t, "")
	d := deployment(t, objs)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	wantArgs := []string{
		"--kubeconfig=/etc/karmada/kubeconfig",
		"--bind-address=:8443",
		"--metrics-bind-address=:8080",
		"--tls-cert-file=/etc/gateway/tls/tls.crt",
		"--tls-key-file=/etc/gateway/tls/tls.key",
		"--auth-mode=passthrough",
		"--member-access=cluster-proxy",
		"--enable-labeler=true",
		"--labeler-workers=4",
		"--leader-elect=true",
		"--leader-election-namespace=karmada-system",
		"--leader-election-id=karmada-exec-gateway-labeler",
		"--shutdown-grace-period=3600s",
		"--read-header-timeout=10s",
		"--upstream-header-timeout=30s",
		"--idle-timeout=90s",
		"--forwarded-for=append",
		"-v=0",
	}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args:\n got %q\nwant %q", c.Args, wantArgs)
	}

	// Restricted pod security.
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod seccompProfile is not RuntimeDefault")
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext is not restricted: %+v", sc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the gateway pod mounts a host-cluster token it never uses")
	}

	// Probes on the metrics port, which serves /healthz and /readyz.
	var metricsPort int32
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			metricsPort = p.ContainerPort
		}
	}
	if metricsPort != 8080 {
		t.Errorf("metrics container port = %d, want 8080", metricsPort)
	}
	for name, pr := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("probe %s missing", name)
			continue
		}
		if pr.HTTPGet.Path != name || pr.HTTPGet.Port != intstr.FromString("metrics") {
			t.Errorf("probe %s: path %q port %v, want %s on the metrics port", name, pr.HTTPGet.Path, pr.HTTPGet.Port.String(), name)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Error("resource requests missing")
	}
	// A rollout never cuts a CI job within GitLab Runner's default job
	// timeout: the drain lasts an hour, and the pod's grace outlasts it.
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 3620 {
		t.Errorf("terminationGracePeriodSeconds = %v, want the 3600 s drain and 20 s for the records", g)
	}
	if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil ||
		len(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Error("default soft pod anti-affinity missing")
	}

	// Upstream kubeconfig from the Karmada components' Secret.
	assertSecretVolume(t, pod, "karmada-kubeconfig", "karmada-kubeconfig", "kubeconfig")
	assertSecretVolume(t, pod, "tls", fullname+"-tls", "tls.crt")

	var pdb struct {
		Spec struct {
			MinAvailable int `json:"minAvailable"`
		} `json:"spec"`
	}
	partial(t, objs.one(t, "PodDisruptionBudget", fullname).Object, &pdb)
	if pdb.Spec.MinAvailable != 1 {
		t.Errorf("PDB minAvailable = %d, want 1", pdb.Spec.MinAvailable)
	}
	objs.one(t, "ServiceAccount", fullname)

	var svc, msvc corev1.Service
	convert(t, objs.one(t, "Service", fullname).Object, &svc)
	convert(t, objs.one(t, "Service", fullname+"-metrics").Object, &msvc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort != intstr.FromString("https") {
		t.Errorf("proxy Service ports = %+v, want only 443 -> https", svc.Spec.Ports)
	}
	if len(msvc.Spec.Ports) != 1 || msvc.Spec.Ports[0].TargetPort != intstr.FromString("metrics") {
		t.Errorf("metrics Service ports = %+v, want only -> metrics", msvc.Spec.Ports)
	}

	for _, kind := range []string{"ServiceMonitor", "PrometheusRule", "Certificate"} {
		if f := objs.find(kind, ""); len(f) != 0 {
			t.Errorf("%s rendered though not enabled", kind)
		}
	}
	if f := objs.find("ConfigMap", fullname+"-dashboard"); len(f) != 0 {
		t.Error("dashboard rendered though not enabled")
	}
}

func assertSecretVolume(t *testing.T, pod corev1.PodSpec, volume, secret, key string) {
	t.Helper()
	for _, v := range pod.Volumes {
		if v.Name != volume {
			continue
		}
		if v.Secret == nil || v.Secret.SecretName != secret {
			t.Errorf("volume %s: want Secret %s, got %+v", volume, secret, v.VolumeSource)
			return
		}
		for _, it := range v.Secret.Items {
			if it.Key == key {
				return
			}
		}
		t.Errorf("volume %s: key %s not mounted (items %+v)", volume, key, v.Secret.Items)
		return
	}
	t.Errorf("volume %s missing", volume)
}

func TestArgsFollowValues(t *testing.T) {
	tests := []struct {
		name     string
		values   string
		want     []string // must appear
		wantNot  []string // prefixes that must not appear
		replicas int32
	}{
		{
			name:     "authorize with client CA",
			values:   valueSets["authorize"],
			want:     []string{"--auth-mode=authorize", "--auth-cache-ttl=30s", "--auth-timeout=10s", "--client-ca-file=/etc/gateway/client-ca/ca.crt"},
			replicas: 2,
		},
		{
			name:     "plain HTTP, one replica, no labeler",
			values:   valueSets["insecure-single-no-labeler"],
			want:     []string{"--insecure-serve-http", "--enable-labeler=false"},
			wantNot:  []string{"--tls-cert-file", "--tls-key-file", "--leader-elect", "--labeler-workers", "--client-ca-file", "--auth-cache-ttl", "--auth-timeout", "--enable-service-proxy"},
			replicas: 1,
		},
		{
			name:     "idle timeout off",
			values:   "idleTimeout: 0s\n",
			want:     []string{"--idle-timeout=0s"},
			replicas: 2,
		},
		{
			name:     "service proxy",
			values:   "serviceProxy: {enabled: true}\n",
			want:     []string{"--enable-service-proxy"},
			replicas: 2,
		},
		{
			name:     "service proxy in authorize mode",
			values:   "auth: {mode: authorize}\nserviceProxy: {enabled: true}\n",
			want:     []string{"--auth-mode=authorize", "--enable-service-proxy"},
			replicas: 2,
		},
		{
			name: "ports, timings and passthrough flags",
			values: `
replicas: 3
ports: {proxy: 9443, metrics: 9090}
shutdownGracePeriodSeconds: 120
readHeaderTimeout: 5s
upstreamHeaderTimeout: 1m
logVerbosity: 4
labeler: {workers: 8, leaderElection: {enabled: false}}
extraArgs: ["--kube-api-qps=200", "--resync-period=1h"]
`,
			want: []string{"--bind-address=:9443", "--metrics-bind-address=:9090", "--shutdown-grace-period=120s",
				"--read-header-timeout=5s", "--upstream-header-timeout=1m", "-v=4", "--labeler-workers=8", "--leader-elect=false",
				"--kube-api-qps=200", "--resync-period=1h"},
			wantNot:  []string{"--leader-election-namespace", "--leader-election-id"},
			replicas: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := deployment(t, render(t, tt.values))
			if *d.Spec.Replicas != tt.replicas {
				t.Errorf("replicas = %d, want %d", *d.Spec.Replicas, tt.replicas)
			}
			args := d.Spec.Template.Spec.Containers[0].Args
			for _, w := range tt.want {
				if !slices.Contains(args, w) {
					t.Errorf("arg %q missing from %q", w, args)
				}
			}
			for _, p := range tt.wantNot {
				for _, a := range args {
					if strings.HasPrefix(a, p) {
						t.Errorf("arg %q present, want no %s", a, p)
					}
				}
			}
		})
	}
}

func TestTimingValues(t *testing.T) {
	d := deployment(t, render(t, "shutdownGracePeriodSeconds: 120\n"))
	if g := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != 140 {
		t.Errorf("terminationGracePeriodSeconds = %d, want shutdown grace + 20 = 140", g)
	}
	objs := render(t, "replicas: 1\n")
	if f := objs.find("PodDisruptionBudget", ""); len(f) != 0 {
		t.Error("a PDB for a single replica would block every node drain")
	}
	d = deployment(t, render(t, "podAntiAffinity: hard\n"))
	if a := d.Spec.Template.Spec.Affinity; a == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Error("hard anti-affinity not rendered as required")
	}
}

// The gateway identity's rules in karmada-apiserver: the README table
// "Auth modes and the RBAC each needs".
var (
	passthroughRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{"work.karmada.io"}, Resources: []string{"resourcebindings"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"cluster.karmada.io"}, Resources: []string{"clusters"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"config.karmada.io"}, Resources: []string{"resourceinterpretercustomizations"}, Verbs: []string{"list"}},
	}
	authorizeRules = append(slices.Clone(passthroughRules),
		rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		rbacv1.PolicyRule{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	)
	// authorize mode, on a ClusterRole of its own (see the chart's _karmada.tpl):
	// every verb a pods/proxy method maps to, as the member RBAC grants.
	clusterProxyRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"cluster.karmada.io"}, Resources: []string{"clusters/proxy"}, Verbs: []string{"get", "create", "update", "patch", "delete"}},
	}
	impersonateRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"users", "groups"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
	}
	leaseRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}
	memberRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach", "pods/portforward"}, Verbs: []string{"get", "create"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers"}, Verbs: []string{"patch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"pods/proxy"}, Verbs: []string{"get", "create", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "watch"}},
	}
	// serviceProxy.enabled in authorize mode: every verb kube-apiserver
	// derives from a services/proxy method the gateway forwards.
	memberServiceProxyRule = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services/proxy"}, Verbs: []string{"get", "create", "update", "patch", "delete"}}
	servicesRule           = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}}
)

// withServices is rules with servicesRule where the chart renders it:
// after the three cache rules.
func withServices(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	return slices.Insert(slices.Clone(rules), 3, servicesRule)
}

func rulesOf(t *testing.T, objs objects, kind, name string) []rbacv1.PolicyRule {
	t.Helper()
	var r struct {
		Rules []rbacv1.PolicyRule `json:"rules"`
	}
	partial(t, objs.one(t, kind, name).Object, &r)
	return r.Rules
}

func subjectsOf(t *testing.T, objs objects, kind, name, wantRole string) []rbacv1.Subject {
	t.Helper()
	var b rbacv1.ClusterRoleBinding // same shape as RoleBinding
	convert(t, objs.one(t, kind, name).Object, &b)
	if b.RoleRef.Name != wantRole {
		t.Errorf("%s %s binds %q, want %q", kind, name, b.RoleRef.Name, wantRole)
	}
	return b.Subjects
}

func TestKarmadaRBAC(t *testing.T) {
	saSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "exec-gateway", Namespace: "karmada-system"}}
	// Karmada's unified-auth needs a ServiceAccount's groups on its clusters/proxy
	// binding, and only there: elsewhere they would grant every ServiceAccount.
	saProxySubjects := append(slices.Clone(saSubjects),
		rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:serviceaccounts"},
		rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:serviceaccounts:karmada-system"},
	)
	adminSubjects := []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "system:admin"}}
	tests := []struct {
		name      string
		values    string
		rules     []rbacv1.PolicyRule
		subjects  []rbacv1.Subject
		proxySubj []rbacv1.Subject // nil: no clusters/proxy binding
		lease     bool
		member    bool
		// memberRules defaults to memberRules.
		memberRules []rbacv1.PolicyRule
	}{
		{name: "passthrough", values: "", rules: passthroughRules, subjects: adminSubjects, lease: true},
		{name: "authorize with client certificates", values: valueSets["authorize"],
			rules: append(slices.Clone(authorizeRules), impersonateRules...), subjects: saSubjects, proxySubj: saProxySubjects, lease: true, member: true},
		{name: "authorize with tokens only", values: "auth: {mode: authorize}\n", rules: authorizeRules, subjects: adminSubjects, proxySubj: adminSubjects, lease: true, member: true},
		{name: "no labeler, no lease", values: valueSets["insecure-single-no-labeler"], rules: passthroughRules, subjects: adminSubjects},
		{name: "service proxy reads services", values: "serviceProxy: {enabled: true}\n",
			rules: withServices(passthroughRules), subjects: adminSubjects, lease: true},
		{name: "service proxy in authorize mode", values: "auth: {mode: authorize}\nserviceProxy: {enabled: true}\n",
			rules: withServices(authorizeRules), subjects: adminSubjects, proxySubj: adminSubjects, lease: true, member: true,
			memberRules: append([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "services"}, Verbs: []string{"get"}}},
				append(slices.Clone(memberRules[1:]), memberServiceProxyRule)...)},
		{name: "authorize without member RBAC", values: "auth: {mode: authorize}\nkarmadaResources: {memberRBAC: false}\n",
			rules: authorizeRules, subjects: adminSubjects, proxySubj: adminSubjects, lease: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := karmadaObjects(t, render(t, tt.values))
			if got := rulesOf(t, k, "ClusterRole", fullname); !reflect.DeepEqual(got, tt.rules) {
				t.Errorf("ClusterRole rules:\n got %+v\nwant %+v", got, tt.rules)
			}
			if got := subjectsOf(t, k, "ClusterRoleBinding", fullname, fullname); !reflect.DeepEqual(got, tt.subjects) {
				t.Errorf("ClusterRoleBinding subjects:\n got %+v\nwant %+v", got, tt.subjects)
			}
			if tt.proxySubj == nil {
				if f := k.find("ClusterRoleBinding", fullname+"-cluster-proxy"); len(f) != 0 {
					t.Error("clusters/proxy granted outside authorize mode")
				}
			} else {
				if got := rulesOf(t, k, "ClusterRole", fullname+"-cluster-proxy"); !reflect.DeepEqual(got, clusterProxyRules) {
					t.Errorf("cluster-proxy rules = %+v, want %+v", got, clusterProxyRules)
				}
				if got := subjectsOf(t, k, "ClusterRoleBinding", fullname+"-cluster-proxy", fullname+"-cluster-proxy"); !reflect.DeepEqual(got, tt.proxySubj) {
					t.Errorf("cluster-proxy subjects:\n got %+v\nwant %+v", got, tt.proxySubj)
				}
			}
			if roles := k.find("Role", fullname+"-leader-election"); (len(roles) == 1) != tt.lease {
				t.Errorf("lease Role rendered = %v, want %v", len(roles) == 1, tt.lease)
			} else if tt.lease {
				if ns := roles[0].GetNamespace(); ns != "karmada-system" {
					t.Errorf("lease Role namespace = %q, want the election namespace karmada-system", ns)
				}
				if got := rulesOf(t, k, "Role", fullname+"-leader-election"); !reflect.DeepEqual(got, leaseRules) {
					t.Errorf("lease rules = %+v, want %+v", got, leaseRules)
				}
				subjectsOf(t, k, "RoleBinding", fullname+"-leader-election", fullname+"-leader-election")
			}
			gotMember := len(k.find("ClusterPropagationPolicy", "")) > 0
			if gotMember != tt.member {
				t.Fatalf("member RBAC rendered = %v, want %v (objects %v)", gotMember, tt.member, k.names())
			}
			if !tt.member {
				if n := len(k.find("ClusterRole", memberName)) + len(k.find("ClusterRoleBinding", memberName)); n != 0 {
					t.Errorf("member ClusterRole/Binding rendered without the policy")
				}
				return
			}
			wantMember := tt.memberRules
			if wantMember == nil {
				wantMember = memberRules
			}
			if got := rulesOf(t, k, "ClusterRole", memberName); !reflect.DeepEqual(got, wantMember) {
				t.Errorf("member rules = %+v, want %+v", got, wantMember)
			}
			if got := subjectsOf(t, k, "ClusterRoleBinding", memberName, memberName); !reflect.DeepEqual(got, tt.subjects) {
				t.Errorf("member subjects = %+v, want the gateway identity %+v", got, tt.subjects)
			}
			assertPropagatesMemberRBAC(t, k.one(t, "ClusterPropagationPolicy", memberName))
		})
	}
}

func assertPropagatesMemberRBAC(t *testing.T, p *unstructured.Unstructured) {
	t.Helper()
	if p.GetAPIVersion() != "policy.karmada.io/v1alpha1" {
		t.Errorf("ClusterPropagationPolicy apiVersion %q", p.GetAPIVersion())
	}
	var spec struct {
		Spec struct {
			ResourceSelectors []struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Name       string `json:"name"`
			} `json:"resourceSelectors"`
			Placement map[string]any `json:"placement"`
		} `json:"spec"`
	}
	partial(t, p.Object, &spec)
	var got []string
	for _, s := range spec.Spec.ResourceSelectors {
		got = append(got, s.APIVersion+" "+s.Kind+" "+s.Name)
	}
	want := []string{
		"rbac.authorization.k8s.io/v1 ClusterRole " + memberName,
		"rbac.authorization.k8s.io/v1 ClusterRoleBinding " + memberName,
	}
	if !slices.Equal(got, want) {
		t.Errorf("resourceSelectors = %q, want %q", got, want)
	}
	// An empty placement selects every member cluster.
	if len(spec.Spec.Placement) != 0 {
		t.Errorf("default placement = %v, want {} (all clusters)", spec.Spec.Placement)
	}
}

func TestHookJob(t *testing.T) {
	objs := render(t, valueSets["authorize"])
	cm := objs.one(t, "ConfigMap", fullname+"-karmada-resources")
	cmAnn := cm.GetAnnotations()
	if cmAnn["helm.sh/hook"] != "pre-install,pre-upgrade,pre-delete" {
		t.Errorf("ConfigMap hook = %q", cmAnn["helm.sh/hook"])
	}
	for _, tt := range []struct {
		name, hook, verb string
	}{
		{fullname + "-karmada-resources-apply", "pre-install,pre-upgrade", "apply"},
		{fullname + "-karmada-resources-delete", "pre-delete", "delete"},
	} {
		t.Run(tt.verb, func(t *testing.T) {
			u := objs.one(t, "Job", tt.name)
			ann := u.GetAnnotations()
			if ann["helm.sh/hook"] != tt.hook {
				t.Errorf("hook = %q, want %q", ann["helm.sh/hook"], tt.hook)
			}
			if ann["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
				t.Errorf("hook-delete-policy = %q", ann["helm.sh/hook-delete-policy"])
			}
			// The ConfigMap the Job mounts must be created first.
			if cmAnn["helm.sh/hook-weight"] != "-10" || ann["helm.sh/hook-weight"] != "0" {
				t.Errorf("weights ConfigMap %q Job %q, want -10 then 0", cmAnn["helm.sh/hook-weight"], ann["helm.sh/hook-weight"])
			}
			var j batchv1.Job
			convert(t, u.Object, &j)
			pod := j.Spec.Template.Spec
			c := pod.Containers[0]
			if !slices.Contains(c.Args, tt.verb) || !slices.Contains(c.Args, "--kubeconfig=/etc/karmada/kubeconfig") ||
				!slices.Contains(c.Args, "--filename=/etc/karmada-resources") {
				t.Errorf("args %q do not %s the manifests with the kubeconfig", c.Args, tt.verb)
			}
			// The same kubeconfig as the gateway: name and key from values.
			assertSecretVolume(t, pod, "karmada-kubeconfig", "gateway-kubeconfig", "config")
			if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
				t.Error("hook Job pod is not runAsNonRoot")
			}
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Error("hook Job mounts a host-cluster token it never uses")
			}
		})
	}

	// passthrough after authorize: the apply Job first deletes the member set.
	var j batchv1.Job
	convert(t, render(t, "").one(t, "Job", fullname+"-karmada-resources-apply").Object, &j)
	if len(j.Spec.Template.Spec.InitContainers) != 1 ||
		!slices.Contains(j.Spec.Template.Spec.InitContainers[0].Args, "clusterpropagationpolicies.policy.karmada.io/"+memberName) {
		t.Errorf("passthrough apply Job does not remove a previous member RBAC set: %+v", j.Spec.Template.Spec.InitContainers)
	}

	// A least-privilege gateway kubeconfig: the Job applies with another one.
	var admin batchv1.Job
	convert(t, render(t, valueSets["authorize"]+"karmadaResources: {job: {kubeconfigSecret: {name: karmada-admin, key: admin.conf}}}\n").
		one(t, "Job", fullname+"-karmada-resources-apply").Object, &admin)
	assertSecretVolume(t, admin.Spec.Template.Spec, "karmada-kubeconfig", "karmada-admin", "admin.conf")

	off := render(t, "karmadaResources: {applyWithHook: false}\n")
	if n := len(off.find("Job", "")) + len(off.find("ConfigMap", "")); n != 0 {
		t.Errorf("applyWithHook=false still renders %d hook objects", n)
	}
}

func TestKarmadaApiserverTarget(t *testing.T) {
	objs := render(t, valueSets["karmada-apiserver-target"])
	for _, u := range objs {
		switch u.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ClusterPropagationPolicy", "ResourceInterpreterCustomization":
		default:
			t.Errorf("%s/%s rendered for karmada-apiserver; only its RBAC and policies belong there", u.GetKind(), u.GetName())
		}
		if _, ok := u.GetAnnotations()["helm.sh/hook"]; ok {
			t.Errorf("%s/%s is a hook in a direct install", u.GetKind(), u.GetName())
		}
	}
	if got := rulesOf(t, objs, "ClusterRole", fullname); !reflect.DeepEqual(got, authorizeRules) {
		t.Errorf("rules = %+v, want %+v", got, authorizeRules)
	}
	objs.one(t, "ClusterRoleBinding", fullname+"-cluster-proxy")
	objs.one(t, "ClusterPropagationPolicy", memberName)

	// The interpreter is the deploy/karmada file itself, not a copy.
	src, err := os.ReadFile("../../deploy/karmada/pod-status-interpreter.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := decodeAll(t, string(src))
	got := objs.find("ResourceInterpreterCustomization", "")
	if len(want) != 1 || len(got) != 1 || !reflect.DeepEqual(got[0].Object, want[0].Object) {
		t.Errorf("rendered ResourceInterpreterCustomization differs from deploy/karmada/pod-status-interpreter.yaml")
	}
	// And the hook ConfigMap ships the same object.
	hooked := karmadaObjects(t, render(t, "")).find("ResourceInterpreterCustomization", "")
	if len(hooked) != 1 || !reflect.DeepEqual(hooked[0].Object, want[0].Object) {
		t.Errorf("hook ConfigMap's ResourceInterpreterCustomization differs from deploy/karmada")
	}
}

// metricNames lists every series name pkg/metrics and pkg/audit export
// (with the histogram suffixes), so alerts and panels cannot reference a
// metric that does not exist.
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	names := map[string]bool{"up": true}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, m := range []any{metrics.New(reg), audit.NewMetrics(reg)} {
		collectorNames(m, fqName, names)
	}
	// The recorder's and the uploader's collectors are registered by
	// their constructors, on a directory.
	dir := t.TempDir()
	recReg := prometheus.NewRegistry()
	if _, err := recording.New(recording.Options{Dir: dir, Mode: recording.ModeAll, MaxSessionBytes: 1, MaxTotalBytes: 1, Registerer: recReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := upload.New(upload.Options{Dir: dir, Store: nopStore{}, Timeout: 1, InitialBackoff: 1, MaxBackoff: 1, Rescan: 1, Registerer: recReg}); err != nil {
		t.Fatal(err)
	}
	mfs, err := recReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	if !names["karmada_gateway_requests_total"] || !names["karmada_gateway_audit_events_dropped_total"] || !names["karmada_gateway_recording_spool_files"] {
		t.Fatalf("could not read metric names from pkg/metrics, pkg/audit, pkg/recording and pkg/upload: %v", names)
	}
	return names
}

// nopStore stores nothing: metricNames only registers an uploader.
type nopStore struct{}

func (nopStore) Put(context.Context, upload.Object) error { return nil }

// collectorNames adds the series names of the collectors in m's fields.
func collectorNames(m any, fqName *regexp.Regexp, names map[string]bool) {
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok {
			continue
		}
		ch := make(chan *prometheus.Desc, 4)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			n := fqName.FindStringSubmatch(d.String())[1]
			names[n] = true
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[n+s] = true
			}
		}
	}
}

var seriesRef = regexp.MustCompile(`\b(karmada_gateway_[a-z_]+|up)\{`)

func TestMonitoring(t *testing.T) {
	objs := render(t, valueSets["cert-manager-monitoring"])
	known := metricNames(t)

	sm := objs.one(t, "ServiceMonitor", fullname)
	if sm.GetLabels()["release"] != "kube-prometheus" {
		t.Error("ServiceMonitor lacks its extra labels")
	}
	var smSpec struct {
		Spec struct {
			Selector  struct{ MatchLabels map[string]string } `json:"selector"`
			Endpoints []struct{ Port, Path string }           `json:"endpoints"`
		} `json:"spec"`
	}
	partial(t, sm.Object, &smSpec)
	msvc := objs.one(t, "Service", fullname+"-metrics")
	for k, v := range smSpec.Spec.Selector.MatchLabels {
		if msvc.GetLabels()[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, which the metrics Service lacks", k, v)
		}
	}
	if objs.one(t, "Service", fullname).GetLabels()["app.kubernetes.io/component"] == "metrics" {
		t.Error("ServiceMonitor would also select the proxy Service")
	}
	if len(smSpec.Spec.Endpoints) != 1 || smSpec.Spec.Endpoints[0].Port != "metrics" || smSpec.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints = %+v", smSpec.Spec.Endpoints)
	}

	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	partial(t, objs.one(t, "PrometheusRule", fullname).Object, &rule)
	var alerts []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if !strings.Contains(r.Expr, `job="`+fullname+`-metrics"`) {
				t.Errorf("%s does not select the gateway's job: %s", r.Alert, r.Expr)
			}
			for _, m := range seriesRef.FindAllStringSubmatch(r.Expr, -1) {
				if !known[m[1]] {
					t.Errorf("%s uses %s, which pkg/metrics does not export", r.Alert, m[1])
				}
			}
		}
	}
	wantAlerts := []string{"KarmadaGatewayDown", "KarmadaGatewayRewrittenRoute5xx", "KarmadaGatewayLabelerNotLeading",
		"KarmadaGatewayLabelerFallingBehind", "KarmadaGatewayResolveFailures", "KarmadaGatewayMemberEventsUnavailable",
		"KarmadaGatewayMemberUnreachableDirectly", "KarmadaGatewayCertificateReloadFailed", "KarmadaGatewayCertificateExpiring",
		"KarmadaGatewayAuditEventsLost", "KarmadaGatewayAuditSinkFailing", "KarmadaGatewayRecordingsNotUploaded", "KarmadaGatewayRecordingRejected", "KarmadaGatewayRecordingSpoolFilling"}
	if !slices.Equal(alerts, wantAlerts) {
		t.Errorf("alerts = %q, want %q", alerts, wantAlerts)
	}

	dash := objs.one(t, "ConfigMap", fullname+"-dashboard")
	if dash.GetLabels()["grafana_dashboard"] != "1" || dash.GetNamespace() != "monitoring" {
		t.Errorf("dashboard ConfigMap labels %v namespace %q", dash.GetLabels(), dash.GetNamespace())
	}
	raw, _, _ := unstructured.NestedString(dash.Object, "data", "karmada-exec-gateway.json")
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	used := map[string]bool{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range seriesRef.FindAllStringSubmatch(tg.Expr, -1) {
				if !known[m[1]] {
					t.Errorf("panel %q uses %s, which pkg/metrics does not export", p.Title, m[1])
				}
				used[strings.TrimSuffix(m[1], "_bucket")] = true
			}
		}
	}
	for n := range known {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if n == base && n != "up" && !used[n] {
			t.Errorf("metric %s has no dashboard panel", n)
		}
	}

	// cert-manager serving certificate feeds the TLS volume.
	cert := objs.one(t, "Certificate", fullname)
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if secretName != fullname+"-tls" || !slices.Contains(dnsNames, fullname+".karmada-system.svc") || !slices.Contains(dnsNames, "gateway.example.com") {
		t.Errorf("Certificate secretName %q dnsNames %q", secretName, dnsNames)
	}
	assertSecretVolume(t, deployment(t, objs).Spec.Template.Spec, "tls", secretName, "tls.key")
}

func TestBadValuesFailClearly(t *testing.T) {
	tests := []struct {
		name, values, want string
	}{
		{"unknown auth mode", "auth: {mode: bogus}\n", "at '/auth/mode': value must be one of 'passthrough', 'authorize'"},
		{"negative replicas", "replicas: -1\n", "at '/replicas': minimum: got -1, want 0"},
		{"unknown target", "target: member\n", "at '/target': value must be one of"},
		{"typo in a key", "replica: 2\n", "additional properties 'replica' not allowed"},
		{"root container", "podSecurityContext: {runAsNonRoot: false}\n", "at '/podSecurityContext/runAsNonRoot': value must be true"},
		{"bad duration", "auth: {cacheTTL: ten}\n", "at '/auth/cacheTTL'"},
		{"extra arg not a flag", "extraArgs: [kube-api-qps]\n", "at '/extraArgs/0'"},
		{"empty kubeconfig Secret", "karmada: {kubeconfigSecret: {name: \"\", key: kubeconfig}}\n", "at '/karmada/kubeconfigSecret/name'"},
		{"cert-manager without issuer", "tls: {source: certManager}\n", "tls.certManager.issuerRef.name is required when tls.source=certManager"},
		{"client CA in passthrough", "auth: {clientCA: {secretName: ca}}\n", "auth.clientCA.secretName is only used with auth.mode=authorize"},
		{"client CA over plain HTTP", "auth: {mode: authorize, clientCA: {secretName: ca}}\ntls: {source: none}\n", "needs TLS serving"},
		{"grace shorter than drain", "terminationGracePeriodSeconds: 20\n", "terminationGracePeriodSeconds (20) must exceed shutdownGracePeriodSeconds (3600)"},
		{"no identity for RBAC", "karmada: {identity: {user: \"\"}}\n", "karmada.identity needs a user, groups or a serviceAccount"},
		{"executors in authorize mode", "auth: {mode: authorize}\npassthrough: {executors: [{namespace: ci, serviceAccount: runner}]}\n", "passthrough.executors is only used with auth.mode=passthrough"},
		{"executor ServiceAccount without namespace", "passthrough: {executors: [{serviceAccount: runner}]}\n", "at '/passthrough/executors/0'"},
		{"executor both user and ServiceAccount", "passthrough: {executors: [{user: u, namespace: ci, serviceAccount: runner}]}\n", "at '/passthrough/executors/0'"},
		{"executor in system:unauthenticated", "passthrough: {executors: [{user: u, groups: [system:unauthenticated]}]}\n", "must not list the group system:unauthenticated"},
		{"executor policy namespace not a name", "executorPolicy: {namespaces: [CI]}\n", "at '/executorPolicy/namespaces/0'"},
		{"bad idle timeout", "idleTimeout: forever\n", "at '/idleTimeout'"},
		{"bucket without credentials", "recording: {mode: tty, s3: {bucket: rec}}\n", "recording.s3.credentialsSecret.name is required with recording.s3.bucket"},
		{"S3 endpoint not http(s)", "recording: {mode: tty, s3: {bucket: rec, endpoint: \"s3.example:9000\", credentialsSecret: {name: s3}}}\n", "at '/recording/s3/endpoint'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stderr := renderError(t, tt.values)
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("error does not say %q:\n%s", tt.want, stderr)
			}
		})
	}
}

// TestShellScripts runs shellcheck on hack/*.sh; a missing shellcheck fails.
func TestShellScripts(t *testing.T) {
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Fatalf("shellcheck not installed (apt-get install -y shellcheck): %v", err)
	}
	scripts, err := filepath.Glob("../../hack/*.sh")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts found in hack/: %v", err)
	}
	if !slices.Contains(scripts, "../../hack/kind-karmada.sh") {
		t.Errorf("hack/kind-karmada.sh missing from %q", scripts)
	}
	out, err := exec.Command(sc, append([]string{"--severity=style", "--external-sources"}, scripts...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("shellcheck: %v\n%s", err, out)
	}
}

// In passthrough mode Karmada's unified-auth controller lets its impersonator
// impersonate only the users, ServiceAccounts and groups listed on
// ClusterRoleBindings that grant clusters/proxy; the cluster proxy
// impersonates the caller with every group but system:authenticated.
func TestPassthroughExecutorsClusterProxy(t *testing.T) {
	const rbacGroup = "rbac.authorization.k8s.io"
	executors := fullname + "-executors-cluster-proxy"
	proxyRule := func(verbs ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{APIGroups: []string{"cluster.karmada.io"}, Resources: []string{"clusters/proxy"}, Verbs: verbs}}
	}
	group := func(name string) rbacv1.Subject {
		return rbacv1.Subject{APIGroup: rbacGroup, Kind: "Group", Name: name}
	}
	gitlabRunner := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "gitlab-runner", Namespace: "ci"}, group("system:serviceaccounts"), group("system:serviceaccounts:ci")}
	tests := []struct {
		name     string
		values   string
		karmada  func(*testing.T, objects) objects // default: the hook ConfigMap's objects
		rules    []rbacv1.PolicyRule               // nil: nothing rendered
		subjects []rbacv1.Subject
	}{
		{name: "none by default", values: ""},
		{
			name:     "a ServiceAccount with both of its groups",
			values:   "passthrough: {executors: [{namespace: ci, serviceAccount: gitlab-runner}]}\n",
			rules:    proxyRule("get", "create"),
			subjects: gitlabRunner,
		},
		{
			name: "ServiceAccounts and a user: each group once, never system:authenticated",
			values: `
passthrough:
  executors:
  - {namespace: ci, serviceAccount: gitlab-runner}
  - {namespace: ci, serviceAccount: gitlab-runner-2}
  - {namespace: builds, serviceAccount: jenkins}
  - {user: "ci:bot", groups: [ci-bots, system:authenticated, system:serviceaccounts]}
`,
			rules: proxyRule("get", "create"),
			subjects: []rbacv1.Subject{
				{Kind: "ServiceAccount", Name: "gitlab-runner", Namespace: "ci"},
				{Kind: "ServiceAccount", Name: "gitlab-runner-2", Namespace: "ci"},
				{Kind: "ServiceAccount", Name: "jenkins", Namespace: "builds"},
				{APIGroup: rbacGroup, Kind: "User", Name: "ci:bot"},
				group("system:serviceaccounts"), group("system:serviceaccounts:ci"), group("system:serviceaccounts:builds"), group("ci-bots"),
			},
		},
		{
			name:     "service proxy: every verb the method can map to",
			values:   "serviceProxy: {enabled: true}\npassthrough: {executors: [{user: alice}]}\n",
			rules:    proxyRule("get", "create", "update", "patch", "delete"),
			subjects: []rbacv1.Subject{{APIGroup: rbacGroup, Kind: "User", Name: "alice"}},
		},
		{
			name:     "target=karmadaApiserver renders them as release objects",
			values:   "target: karmadaApiserver\npassthrough: {executors: [{namespace: ci, serviceAccount: gitlab-runner}]}\n",
			karmada:  func(_ *testing.T, o objects) objects { return o },
			rules:    proxyRule("get", "create"),
			subjects: gitlabRunner,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			all := render(t, tt.values)
			pick := tt.karmada
			if pick == nil {
				pick = karmadaObjects
			}
			k := pick(t, all)
			if tt.rules == nil {
				if f := append(k.find("ClusterRole", executors), k.find("ClusterRoleBinding", executors)...); len(f) != 0 {
					t.Fatalf("rendered %v without executors", f.names())
				}
				// An earlier release's binding is removed on upgrade.
				var j batchv1.Job
				convert(t, all.one(t, "Job", fullname+"-karmada-resources-apply").Object, &j)
				if ic := j.Spec.Template.Spec.InitContainers; len(ic) != 1 || !slices.Contains(ic[0].Args, "clusterrolebindings.rbac.authorization.k8s.io/"+executors) ||
					!slices.Contains(ic[0].Args, "clusterroles.rbac.authorization.k8s.io/"+executors) {
					t.Errorf("stale executors' binding not deleted on upgrade: %+v", ic)
				}
				return
			}
			if got := rulesOf(t, k, "ClusterRole", executors); !reflect.DeepEqual(got, tt.rules) {
				t.Errorf("rules = %+v, want %+v", got, tt.rules)
			}
			if got := subjectsOf(t, k, "ClusterRoleBinding", executors, executors); !reflect.DeepEqual(got, tt.subjects) {
				t.Errorf("subjects =\n %+v\nwant\n %+v", got, tt.subjects)
			}
			for _, u := range k.find("RoleBinding", "") {
				if strings.Contains(u.GetName(), "executors") {
					t.Errorf("RoleBinding %s: unified-auth reads only ClusterRoleBindings", u.GetName())
				}
			}
		})
	}
}

type resourceSelector struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
}

// propagationPolicy is the part of a PropagationPolicy the tests check.
type propagationPolicy struct {
	Metadata struct{ Name, Namespace string } `json:"metadata"`
	Spec     struct {
		PropagateDeps     bool               `json:"propagateDeps"`
		ResourceSelectors []resourceSelector `json:"resourceSelectors"`
		Placement         struct {
			ClusterAffinity   map[string]any `json:"clusterAffinity"`
			SpreadConstraints []struct {
				SpreadByField string `json:"spreadByField"`
				MaxGroups     int    `json:"maxGroups"`
				MinGroups     int    `json:"minGroups"`
			} `json:"spreadConstraints"`
			ReplicaScheduling struct {
				Type string `json:"replicaSchedulingType"`
			} `json:"replicaScheduling"`
		} `json:"placement"`
	} `json:"spec"`
}

// checkExecutorPolicy fails unless p sends its job's dependencies (registry
// credentials) with the pod and places each pod on exactly one cluster.
func checkExecutorPolicy(t *testing.T, where string, p propagationPolicy) {
	t.Helper()
	if !p.Spec.PropagateDeps {
		t.Errorf("%s: propagateDeps is not true: a job's Secrets would never reach the member", where)
	}
	if len(p.Spec.ResourceSelectors) != 1 || p.Spec.ResourceSelectors[0].APIVersion != "v1" || p.Spec.ResourceSelectors[0].Kind != "Pod" {
		t.Errorf("%s: resourceSelectors = %+v, want the Pods", where, p.Spec.ResourceSelectors)
	}
	one := p.Spec.Placement.ReplicaScheduling.Type == "Divided"
	for _, c := range p.Spec.Placement.SpreadConstraints {
		one = one || c.SpreadByField == "cluster" && c.MaxGroups == 1
	}
	if !one {
		t.Errorf("%s: neither Divided nor spreadConstraints maxGroups 1: a bare Pod would run on every selected cluster", where)
	}
}

func TestExecutorPolicy(t *testing.T) {
	for _, tt := range []struct {
		name, values string
		want         []string // namespaces with a policy
		affinity     map[string]any
	}{
		{name: "none by default"},
		{
			name:   "one per namespace",
			values: "executorPolicy: {namespaces: [ci, builds], clusterAffinity: {clusterNames: [member1, member2]}}\n",
			want:   []string{"ci", "builds"}, affinity: map[string]any{"clusterNames": []any{"member1", "member2"}},
		},
		{
			name:   "in authorize mode too, under another name",
			values: "auth: {mode: authorize}\nexecutorPolicy: {namespaces: [ci], name: jobs}\n",
			want:   []string{"ci"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			policies := karmadaObjects(t, render(t, tt.values)).find("PropagationPolicy", "")
			var got []string
			for _, u := range policies {
				var p propagationPolicy
				partial(t, u.Object, &p)
				got = append(got, p.Metadata.Namespace)
				checkExecutorPolicy(t, "chart's "+p.Metadata.Namespace+"/"+p.Metadata.Name, p)
				if !reflect.DeepEqual(p.Spec.Placement.ClusterAffinity, tt.affinity) {
					t.Errorf("clusterAffinity = %v, want %v", p.Spec.Placement.ClusterAffinity, tt.affinity)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("policies in %q, want %q", got, tt.want)
			}
		})
	}
}

// checkMemberRBACPolicy fails unless p sends RBAC objects, by name, to a
// copy in every cluster it selects: spreading them would leave members
// where the executor is refused.
func checkMemberRBACPolicy(t *testing.T, where string, p propagationPolicy) {
	t.Helper()
	for _, s := range p.Spec.ResourceSelectors {
		if s.APIVersion != "rbac.authorization.k8s.io/v1" || s.Name == "" {
			t.Errorf("%s: selector %+v is not an RBAC object by name", where, s)
		}
	}
	if p.Spec.Placement.ReplicaScheduling.Type == "Divided" || len(p.Spec.Placement.SpreadConstraints) > 0 {
		t.Errorf("%s: Divided or spread: the RBAC would reach only some members", where)
	}
}

// TestDocumentedPropagationPolicies: every PropagationPolicy the README and
// deploy/karmada/README.md show executors has the fields a CI pod needs,
// and the README's policy for the executors' member RBAC copies it to
// every member.
func TestDocumentedPropagationPolicies(t *testing.T) {
	block := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	for _, doc := range []string{"../../README.md", "../../deploy/karmada/README.md"} {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		pods, rbac := 0, 0
		for _, m := range block.FindAllStringSubmatch(string(src), -1) {
			if !strings.Contains(m[1], "kind: PropagationPolicy") {
				continue // snippets, not objects
			}
			for _, u := range decodeAll(t, m[1]) {
				if u.GetKind() != "PropagationPolicy" {
					continue
				}
				var p propagationPolicy
				partial(t, u.Object, &p)
				if slices.ContainsFunc(p.Spec.ResourceSelectors, func(s resourceSelector) bool { return s.Kind == "Pod" }) {
					checkExecutorPolicy(t, doc, p)
					pods++
				} else {
					checkMemberRBACPolicy(t, doc+" "+p.Metadata.Name, p)
					rbac++
				}
			}
		}
		if doc == "../../README.md" && (pods == 0 || rbac == 0) {
			t.Errorf("%s shows %d PropagationPolicies for executors' pods and %d for their member RBAC, want both", doc, pods, rbac)
		}
	}
}

// TestAuditLogPerPod: each replica writes its own audit log file, named
// after its pod, so replicas sharing a volume (a ReadWriteMany claim) never
// append to and rotate one file together; the name comes from the
// downward API, which the kubelet expands in the argument.
func TestAuditLogPerPod(t *testing.T) {
	d := deployment(t, render(t, "audit:\n  log:\n    enabled: true\n"))
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--audit-log-path=/var/log/gateway-audit/audit-$(POD_NAME).log") {
		t.Errorf("args %v do not name a log per pod", c.Args)
	}
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" })
	if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("env %+v: want POD_NAME from metadata.name, declared before the args use it", c.Env)
	}
}

// TestRecordingsBucket: with recording.s3 the gateway gets the bucket's
// flags, and its credentials and CA as files mounted from their Secrets,
// never in its environment or its arguments; hostAliases reach the pod.
func TestRecordingsBucket(t *testing.T) {
	d := deployment(t, render(t, `recording:
  mode: tty
  s3:
    bucket: rec
    endpoint: https://s3.example:9000
    region: eu-west-1
    prefix: prod/
    pathStyle: true
    credentialsSecret: {name: s3-keys, accessKeyIDKey: id, secretAccessKeyKey: secret}
    caSecret: {name: s3-ca, key: bundle.pem}
hostAliases: [{ip: 10.0.0.9, hostnames: [rec.s3.example]}]
`))
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	for _, want := range []string{"--record-sessions-s3-bucket=rec", "--record-sessions-s3-endpoint=https://s3.example:9000",
		"--record-sessions-s3-region=eu-west-1", "--record-sessions-s3-prefix=prod/", "--record-sessions-s3-path-style=true",
		"--record-sessions-s3-access-key-id-file=/etc/gateway/recordings-s3/access-key-id",
		"--record-sessions-s3-secret-access-key-file=/etc/gateway/recordings-s3/secret-access-key",
		"--record-sessions-s3-ca-file=/etc/gateway/recordings-s3-ca/ca.crt"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args lack %s: %v", want, c.Args)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("env %s comes from a Secret; credentials are mounted files", e.Name)
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	keys := vols["recordings-s3"].Secret
	if keys == nil || keys.SecretName != "s3-keys" || len(keys.Items) != 2 || keys.Items[0] != (corev1.KeyToPath{Key: "id", Path: "access-key-id"}) ||
		keys.Items[1] != (corev1.KeyToPath{Key: "secret", Path: "secret-access-key"}) {
		t.Errorf("credentials volume %+v", vols["recordings-s3"].VolumeSource)
	}
	if ca := vols["recordings-s3-ca"].Secret; ca == nil || ca.SecretName != "s3-ca" || len(ca.Items) != 1 || ca.Items[0].Key != "bundle.pem" {
		t.Errorf("CA volume %+v", vols["recordings-s3-ca"].VolumeSource)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	if m := mounts["recordings-s3"]; m.MountPath != "/etc/gateway/recordings-s3" || !m.ReadOnly {
		t.Errorf("credentials mount %+v", m)
	}
	if len(spec.HostAliases) != 1 || spec.HostAliases[0].IP != "10.0.0.9" {
		t.Errorf("hostAliases %+v", spec.HostAliases)
	}
	// Without a bucket nothing of it is rendered.
	c = deployment(t, render(t, "recording:\n  mode: tty\n")).Spec.Template.Spec.Containers[0]
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--record-sessions-s3-") }) {
		t.Errorf("args without a bucket: %v", c.Args)
	}
}

// TestVolumeTypeReplacesTheDefault: a recording or audit volume of another
// type, set on install as the values' comments suggest (a
// persistentVolumeClaim, a hostPath), replaces the default emptyDir, which
// helm merges it with, rather than making a volume of two types that the
// API server refuses.
func TestVolumeTypeReplacesTheDefault(t *testing.T) {
	d := deployment(t, render(t, "recording:\n  mode: tty\n  volume:\n    persistentVolumeClaim: {claimName: recordings}\n"+
		"audit:\n  log:\n    enabled: true\n    volume:\n      hostPath: {path: /var/log/gateway, type: Directory}\n"))
	vols := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	if v := vols["recordings"]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "recordings" || v.EmptyDir != nil {
		t.Errorf("recordings volume %+v, want the claim alone", v.VolumeSource)
	}
	if v := vols["audit-log"]; v.HostPath == nil || v.EmptyDir != nil {
		t.Errorf("audit-log volume %+v, want the host path alone", v.VolumeSource)
	}
	d = deployment(t, render(t, "recording:\n  mode: tty\n"))
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "recordings" && (v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil) {
			t.Errorf("the default recordings volume is %+v, want the emptyDir with its size limit", v.VolumeSource)
		}
	}
}
