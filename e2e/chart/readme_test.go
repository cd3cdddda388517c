package chart

import (
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/helmtest"
)

// shellWords splits a README command as the shell would (quotes), by
// asking bash to print the words it parsed.
func shellWords(t *testing.T, cmd string) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "bash", "-c", `printf '%s\0' `+cmd).Output()
	if err != nil {
		t.Fatalf("split %q: %v", cmd, err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// TestReadmeHelmInstall checks README's "Install with Helm" commands as far
// as they go without a cluster: the TLS Secret it creates is the one the
// release it installs mounts (a wrong name leaves the pods waiting for a
// volume), and the helm template command it gives to see the
// karmada-apiserver objects renders those objects and nothing for the host.
func TestReadmeHelmInstall(t *testing.T) {
	cmds := helmtest.ReadmeHelmCommands(t)
	secretRE := regexp.MustCompile(`^kubectl -n (\S+) create secret tls (\S+) `)
	installRE := regexp.MustCompile(`^helm install (\S+) charts/gateway -n (\S+)$`)
	var secretNS, secret, release, releaseNS, template string
	for _, c := range cmds {
		if m := secretRE.FindStringSubmatch(c); m != nil && secret == "" {
			secretNS, secret = m[1], m[2]
		}
		if m := installRE.FindStringSubmatch(c); m != nil && release == "" {
			release, releaseNS = m[1], m[2]
		}
		if strings.HasPrefix(c, "helm template ") && strings.Contains(c, "target=karmadaApiserver") {
			template = c
		}
	}
	if secret == "" || release == "" || template == "" {
		t.Fatalf("README's Helm section lacks the TLS Secret (%q), the plain helm install (%q) or the helm template of the karmada-apiserver objects (%q):\n%s",
			secret, release, template, strings.Join(cmds, "\n"))
	}

	if secretNS != releaseNS {
		t.Errorf("README creates the TLS Secret in %s and installs the release in %s", secretNS, releaseNS)
	}
	out, stderr, err := runHelm(t, "template", release, chartDir, "--namespace", releaseNS, "--kube-version", kubeVersion)
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", release, err, stderr)
	}
	deployments := decodeAll(t, out).find("Deployment", "")
	if len(deployments) != 1 {
		t.Fatalf("release %s renders %d Deployments, want 1", release, len(deployments))
	}
	var pod struct {
		Spec struct {
			Template struct {
				Spec struct {
					Volumes []struct {
						Name   string
						Secret *struct{ SecretName string }
					}
				}
			}
		}
	}
	partial(t, deployments[0].Object, &pod)
	mounted := ""
	for _, v := range pod.Spec.Template.Spec.Volumes {
		if v.Name == "tls" && v.Secret != nil {
			mounted = v.Secret.SecretName
		}
	}
	if mounted != secret {
		t.Errorf("README creates the TLS Secret %q, but release %s mounts %q", secret, release, mounted)
	}

	args := shellWords(t, template)[1:] // without "helm"
	for i, a := range args {
		if a == "charts/gateway" {
			args[i] = chartDir
		}
	}
	out, stderr, err = runHelm(t, append(args, "--kube-version", kubeVersion)...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", template, err, stderr)
	}
	objs := decodeAll(t, out)
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment", "Service", "Job", "ConfigMap", "ServiceAccount", "PodDisruptionBudget":
			t.Errorf("%s renders host object %s %s", template, o.GetKind(), o.GetName())
		}
	}
	var executors []rbacv1.Subject
	for _, crb := range objs.find("ClusterRoleBinding", "") {
		var b rbacv1.ClusterRoleBinding
		convert(t, crb.Object, &b)
		if strings.HasSuffix(b.Name, "-executors-cluster-proxy") {
			executors = b.Subjects
		}
	}
	want := rbacv1.Subject{Kind: "ServiceAccount", Name: "gitlab-runner", Namespace: "ci"}
	if !slices.Contains(executors, want) {
		t.Errorf("%s renders no executors' clusters/proxy binding for ci/gitlab-runner (subjects %+v)", template, executors)
	}
}

// TestReadmeDirectMemberAccess renders a release with the README's option
// for direct member access, as written, with the gateway and member-trust
// given identities of their own: the gateway runs with
// --member-access=direct, its review flags and the published Secret's name,
// and its karmada-apiserver identity may read that one Secret by name and
// no other (never the Secrets Clusters name, which hold cluster-admin
// tokens), and create TokenReviews and SubjectAccessReviews; the
// member-trust Deployment publishes into that Secret, its identity alone
// reading Secrets in karmada-cluster; nothing that selects the gateway's
// pods selects its.
func TestReadmeDirectMemberAccess(t *testing.T) {
	var opt string
	for _, line := range helmtest.ReadmeHelmSection(t) {
		if v, ok := strings.CutPrefix(line, "# direct member access:"); ok {
			opt, _, _ = strings.Cut(v, "[")
			opt = strings.TrimSpace(opt)
		}
	}
	if opt == "" {
		t.Fatal(`README's Helm section lacks the "# direct member access:" option`)
	}
	const published = "karmada-cluster/gw-karmada-exec-gateway-member-trust"
	args := append([]string{"template", "gw", chartDir, "--namespace", "karmada-system", "--kube-version", kubeVersion,
		"--set", "karmada.identity.user=gateway", "--set", "memberAccess.memberTrust.identity.user=member-trust"}, shellWords(t, opt)...)
	for _, target := range []string{"host", "karmadaApiserver"} {
		out, stderr, err := runHelm(t, append(args, "--set", "target="+target)...)
		if err != nil {
			t.Fatalf("helm template with %s: %v\n%s", opt, err, stderr)
		}
		objs := decodeAll(t, out)
		if target == "host" {
			gw := deployment(t, objs)
			c := gw.Spec.Template.Spec.Containers[0]
			for _, want := range []string{"--member-access=direct", "--auth-cache-ttl=10s", "--auth-timeout=10s", "--member-trust-secret=" + published} {
				if !slices.Contains(c.Args, want) {
					t.Errorf("with %s the gateway's args %q lack %s", opt, c.Args, want)
				}
			}
			var trust appsv1.Deployment
			convert(t, objs.one(t, "Deployment", fullname+"-member-trust").Object, &trust)
			if args := trust.Spec.Template.Spec.Containers[0].Args; len(args) < 2 || args[0] != "member-trust" || !slices.Contains(args, "--member-trust-secret="+published) {
				t.Errorf("the member-trust Deployment runs %q; want gateway member-trust publishing %s", args, published)
			}
			trustLabels := labels.Set(trust.Spec.Template.Labels)
			for _, kind := range []string{"Service", "PodDisruptionBudget"} {
				for _, o := range objs.find(kind, "") {
					sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector")
					if sel == nil {
						sel, _, _ = unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
					}
					if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(trustLabels) {
						t.Errorf("%s %s selects the member-trust pods", kind, o.GetName())
					}
				}
			}
			if labels.SelectorFromSet(gw.Spec.Selector.MatchLabels).Matches(trustLabels) {
				t.Error("the gateway Deployment's selector matches the member-trust pods")
			}
			continue
		}
		secretRules := map[string][]string{} // by subject
		for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
			for _, o := range objs.find(kind, "") {
				var b rbacv1.RoleBinding
				convert(t, o.Object, &b)
				roleKind := "Role"
				if kind == "ClusterRoleBinding" {
					roleKind = "ClusterRole"
				}
				var r rbacv1.ClusterRole
				for _, ro := range objs.find(b.RoleRef.Kind, b.RoleRef.Name) {
					if roleKind == "ClusterRole" || ro.GetNamespace() == b.Namespace {
						convert(t, ro.Object, &r)
					}
				}
				for _, rule := range r.Rules {
					if !slices.Contains(rule.Resources, "secrets") {
						continue
					}
					for _, sub := range b.Subjects {
						secretRules[sub.Name] = append(secretRules[sub.Name], fmt.Sprintf("%s %s/%s %s %v", roleKind, b.Namespace, r.Name, strings.Join(rule.Verbs, ","), rule.ResourceNames))
					}
				}
			}
		}
		want := map[string][]string{
			"gateway": {"Role karmada-cluster/gw-karmada-exec-gateway-member-trust-secret get,list,watch [gw-karmada-exec-gateway-member-trust]"},
			"member-trust": {
				"Role karmada-cluster/gw-karmada-exec-gateway-member-trust-read get,list,watch []",
				"Role karmada-cluster/gw-karmada-exec-gateway-member-trust-publish create []",
				"Role karmada-cluster/gw-karmada-exec-gateway-member-trust-publish get,update [gw-karmada-exec-gateway-member-trust]",
			},
		}
		for sub, rules := range secretRules {
			slices.Sort(rules)
			w := slices.Clone(want[sub])
			slices.Sort(w)
			if !slices.Equal(rules, w) {
				t.Errorf("with %s, %s is granted Secrets by %q, want %q", opt, sub, rules, w)
			}
		}
		if len(secretRules) != len(want) {
			t.Errorf("with %s, Secrets are granted to %v, want only the gateway and member-trust", opt, slices.Collect(maps.Keys(secretRules)))
		}
		var reviews []string
		for _, o := range objs.find("ClusterRole", "") {
			var r rbacv1.ClusterRole
			convert(t, o.Object, &r)
			for _, rule := range r.Rules {
				for _, res := range rule.Resources {
					if res == "tokenreviews" || res == "subjectaccessreviews" {
						reviews = append(reviews, res)
					}
				}
			}
		}
		if len(reviews) != 2 {
			t.Errorf("with %s the gateway's ClusterRoles grant %q, want tokenreviews and subjectaccessreviews", opt, reviews)
		}
	}
}
