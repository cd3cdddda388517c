package chart

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

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
// for direct member access, as written: the gateway runs with
// --member-access=direct and its review flags, and its karmada-apiserver
// identity may read Secrets in karmada-cluster only (a Role there, nothing
// cluster-wide) and create TokenReviews and SubjectAccessReviews.
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
	args := append([]string{"template", "gw", chartDir, "--namespace", "karmada-system", "--kube-version", kubeVersion}, shellWords(t, opt)...)
	for _, target := range []string{"host", "karmadaApiserver"} {
		out, stderr, err := runHelm(t, append(args, "--set", "target="+target)...)
		if err != nil {
			t.Fatalf("helm template with %s: %v\n%s", opt, err, stderr)
		}
		objs := decodeAll(t, out)
		if target == "host" {
			c := deployment(t, objs).Spec.Template.Spec.Containers[0]
			for _, want := range []string{"--member-access=direct", "--auth-cache-ttl=10s", "--auth-timeout=10s"} {
				if !slices.Contains(c.Args, want) {
					t.Errorf("with %s the gateway's args %q lack %s", opt, c.Args, want)
				}
			}
			continue
		}
		var secretRoles []string
		for _, kind := range []string{"Role", "ClusterRole"} {
			for _, o := range objs.find(kind, "") {
				var r rbacv1.ClusterRole
				convert(t, o.Object, &r)
				for _, rule := range r.Rules {
					if slices.Contains(rule.Resources, "secrets") {
						secretRoles = append(secretRoles, kind+" "+o.GetNamespace()+"/"+o.GetName()+" "+strings.Join(rule.Verbs, ","))
					}
				}
			}
		}
		if want := []string{"Role karmada-cluster/gw-karmada-exec-gateway-member-secrets get,list,watch"}; !slices.Equal(secretRoles, want) {
			t.Errorf("with %s, Secrets are granted by %q, want %q", opt, secretRoles, want)
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
