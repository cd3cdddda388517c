package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// GitLab Runner's kubernetes executor mounts emptyDir volumes for the
// checkout, the scripts and the job log in both containers, the latter two
// at paths named after the project and job.
const (
	gitlabBuildsDir  = "/builds"
	gitlabScriptsDir = "/scripts-1-42"
	gitlabLogsDir    = "/logs-1-42"
	gitlabLogFile    = gitlabLogsDir + "/output.log"
)

// gitlabPod is a GitLab Runner job pod: "build" runs a shell reading the
// job script from its stdin (the attach strategy) after printing twelve
// boot lines as its container log; "helper" idles, as the runner helper
// does between its read-logs execs, in the image with our stand-in for
// GitLab's helper binary. Both mount the runner's emptyDir volumes; the
// build works in the checkout. The pod pulls with the per-job registry
// Secret the runner creates, named in imagePullSecrets.
func gitlabPod(name, registrySecret string) *corev1.Pod {
	pod := env.ShellPod(env.Namespace, name, `for i in $(seq 1 12); do echo "boot-$i"; done; exec sh`)
	pod.Spec.Containers[0].Name = "build"
	pod.Spec.Containers[0].Stdin = true
	pod.Spec.Containers[0].WorkingDir = gitlabBuildsDir
	pod.Spec.Containers = append(pod.Spec.Containers, env.LocalContainer("helper", images.GitLabHelper, "sh", "-c", `while true; do sleep 1; done`))
	pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: registrySecret}}
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "repo", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "scripts", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].VolumeMounts = []corev1.VolumeMount{
			{Name: "repo", MountPath: gitlabBuildsDir},
			{Name: "scripts", MountPath: gitlabScriptsDir},
			{Name: "logs", MountPath: gitlabLogsDir},
		}
	}
	return pod
}

// gitlabURL builds a pod subresource URL through the gateway as GitLab
// Runner does: Param("container", c) and then VersionedParams of options
// that name the container again, so container= is in the query twice.
func gitlabURL(t *testing.T, pod, sub, container string, opts runtime.Object) *url.URL {
	t.Helper()
	u := gatewayClient(t, env.UserExecOnly).CoreV1().RESTClient().Post().
		Resource("pods").Namespace(env.Namespace).Name(pod).SubResource(sub).
		Param("container", container).VersionedParams(opts, scheme.ParameterCodec).URL()
	if got := u.Query()["container"]; len(got) != 2 || got[0] != container || got[1] != container {
		t.Fatalf("the replayed URL %s has container=%v, want %q twice as GitLab Runner sends it", u, got, container)
	}
	return u
}

// TestExecutorGitLabRunner replays the calls of GitLab Runner's kubernetes
// executor (client-go, SPDY) through the gateway: pod polling and the
// Running watch, the tailLines=10 log probe, the follow+timestamps log of
// honor-entrypoint, the attach strategy (script on the build container's
// stdin, output read by offset-resumable execs in the helper), the legacy
// exec strategy, and the web terminal's raw channel.k8s.io WebSocket. The
// job's registry Secret, created through the gateway as the runner does,
// follows the pod to its member (the policy propagates dependencies).
func TestExecutorGitLabRunner(t *testing.T) {
	t.Parallel()
	dumpLogsOnFailure(t)
	const name, member = "exec-gitlab", "member2"
	registry := gitlabRegistrySecret(t, name+"-registry")
	pod := gitlabPod(name, registry.Name)
	policy := namedPolicy(name, []string{name}, []string{member})
	policy.Object["spec"].(map[string]any)["propagateDeps"] = true
	createPodWithPolicy(t, pod, policy)
	waitPlaced(t, name, member)
	gw := gatewayClient(t, env.UserExecOnly)

	t.Run("registry secret follows the pod", func(t *testing.T) {
		cs, err := testEnv.MemberClient(member)
		if err != nil {
			t.Fatal(err)
		}
		var last error
		err = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			s, err := cs.CoreV1().Secrets(env.Namespace).Get(ctx, registry.Name, metav1.GetOptions{})
			if err != nil {
				last = err
				return false, nil
			}
			if s.Type != corev1.SecretTypeDockerConfigJson || !bytes.Equal(s.Data[corev1.DockerConfigJsonKey], registry.Data[corev1.DockerConfigJsonKey]) {
				return false, fmt.Errorf("the member's copy of %s has type %s and %d bytes of config, want the runner's", registry.Name, s.Type, len(s.Data[corev1.DockerConfigJsonKey]))
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("registry Secret %s never reached %s (last %v): %v", registry.Name, member, last, err)
		}
	})
	cfg, err := testEnv.GatewayConfig(env.UserExecOnly)
	if err != nil {
		t.Fatal(err)
	}
	buildDir := workingDir(pod, "build")

	t.Run("get pod and watch Running", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		p, err := gw.CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("GET pod through the gateway: phase %q, want Running", p.Status.Phase)
		}
		w, err := gw.CoreV1().Pods(env.Namespace).Watch(ctx, metav1.ListOptions{
			FieldSelector: "status.phase=Running,metadata.name=" + name,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the Running watch closed without an event")
			}
			got, isPod := ev.Object.(*corev1.Pod)
			if ev.Type != watch.Added || !isPod || got.Name != name || got.Status.Phase != corev1.PodRunning {
				t.Errorf("the Running watch sent %s %T %v, want ADDED of Running pod %s", ev.Type, ev.Object, ev.Object, name)
			}
		case <-ctx.Done():
			t.Fatal("the watch with fieldSelector status.phase=Running,metadata.name sent nothing")
		}
	})

	t.Run("version and access review", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		v, err := gw.Discovery().ServerVersion()
		if err != nil || v.GitVersion == "" {
			t.Fatalf("GET /version through the gateway: %v, %+v", err, v)
		}
		// The runner checks it may exec before it starts the job.
		review, err := gw.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: env.Namespace, Verb: "create", Resource: "pods", Subresource: "exec", Name: name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !review.Status.Allowed {
			t.Errorf("SelfSubjectAccessReview for create pods/exec: %+v, want allowed for exec-only", review.Status)
		}
	})

	t.Run("log probe tailLines=10", func(t *testing.T) {
		logs := countRoute(t, metrics.RouteLog, "200")
		var want strings.Builder
		for i := 3; i <= 12; i++ {
			fmt.Fprintf(&want, "boot-%d\n", i)
		}
		tailLines := int64(10)
		var got string
		// The probe is the runner's "is the container up" check: poll it.
		err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			b, err := gw.CoreV1().Pods(env.Namespace).GetLogs(name, &corev1.PodLogOptions{Container: "build", TailLines: &tailLines}).DoRaw(ctx)
			if err != nil {
				return false, fmt.Errorf("pods/log?tailLines=10 through the gateway: %w", err)
			}
			got = string(b)
			return got == want.String(), nil
		})
		if err != nil {
			t.Fatalf("pods/log?container=build&tailLines=10 returned %q, want %q: %v", got, want.String(), err)
		}
		logs.check(t, 1)
	})

	t.Run("log follow with timestamps", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		req := gw.CoreV1().Pods(env.Namespace).GetLogs(name, &corev1.PodLogOptions{Container: "build", Follow: true, Timestamps: true})
		if q := req.URL().Query(); q.Get("follow") != "true" || q.Get("timestamps") != "true" {
			t.Fatalf("replayed log URL %s lacks follow=true&timestamps=true", req.URL())
		}
		rc, err := req.Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		sc := bufio.NewScanner(rc)
		for i := 1; i <= 12; i++ {
			if !sc.Scan() {
				t.Fatalf("the followed log ended after %d lines: %v", i-1, sc.Err())
			}
			ts, text, ok := strings.Cut(sc.Text(), " ")
			if !ok || text != fmt.Sprintf("boot-%d", i) {
				t.Fatalf("followed log line %d is %q, want \"<timestamp> boot-%d\"", i, sc.Text(), i)
			}
			if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
				t.Errorf("followed log line %d: timestamp %q: %v", i, ts, err)
			}
		}
	})

	t.Run("attach strategy and read-logs with offsets", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		attaches := countRoute(t, metrics.RouteAttach, "101")
		execs := countRoute(t, metrics.RouteExec, "101")

		// The script the runner writes on the build container's stdin: job
		// output goes to a log file, the helper reads it by offset.
		const script = "{ echo job-line-1; echo job-line-2; echo job-line-3; } >> " + gitlabLogFile + "\n" +
			"while [ ! -e go ]; do sleep 0.05; done\n" +
			"{ echo job-line-4; echo job-line-5; pwd; } >> " + gitlabLogFile + "\n"
		attachURL := gitlabURL(t, name, "attach", "build", &corev1.PodAttachOptions{Container: "build", Stdin: true})
		if q := attachURL.Query(); q.Get("stdin") != "true" || q.Has("stdout") || q.Has("stderr") {
			t.Fatalf("attach URL %s, want stdin only", attachURL)
		}
		attach, err := remotecommand.NewSPDYExecutor(cfg, "POST", attachURL)
		if err != nil {
			t.Fatal(err)
		}
		stdinR, stdinW := io.Pipe()
		attachCtx, stopAttach := context.WithCancel(ctx)
		attachDone := make(chan error, 1)
		go func() {
			attachDone <- attach.StreamWithContext(attachCtx, remotecommand.StreamOptions{Stdin: stdinR})
		}()
		defer func() {
			// The runner drops the attach when the job is over.
			stopAttach()
			_ = stdinW.Close()
			select {
			case <-attachDone:
			case <-time.After(30 * time.Second):
				t.Error("the attach did not end after its context was canceled")
			}
		}()
		if _, err := io.WriteString(stdinW, script); err != nil {
			t.Fatalf("write the job script on the attach stdin: %v", err)
		}

		// read-logs, first connection: follows the log from offset 0 and is
		// cut once the first part is read (a dropped connection).
		readLogs := func(offset int) []string {
			return []string{"gitlab-runner-helper", "read-logs", "--path", gitlabLogFile, "--offset", fmt.Sprint(offset), "--wait-file-timeout", "1m0s"}
		}
		const part1 = "job-line-1\njob-line-2\njob-line-3\n"
		first, err := remotecommand.NewSPDYExecutor(cfg, "POST", gitlabURL(t, name, "exec", "helper", &corev1.PodExecOptions{
			Container: "helper", Command: readLogs(0), Stdout: true, Stderr: true,
		}))
		if err != nil {
			t.Fatal(err)
		}
		var out1, err1 syncBuffer
		firstCtx, cut := context.WithCancel(ctx)
		firstDone := make(chan error, 1)
		go func() {
			firstDone <- first.StreamWithContext(firstCtx, remotecommand.StreamOptions{Stdout: &out1, Stderr: &err1})
		}()
		if err := waitString(ctx, &out1, "job-line-3\n", 30*time.Second); err != nil {
			cut()
			t.Fatalf("read-logs from offset 0: %v (stderr %q)", err, err1.String())
		}
		cut()
		select {
		case <-firstDone:
		case <-time.After(30 * time.Second):
			t.Fatal("the cut read-logs exec did not end")
		}
		if got := out1.String(); got != part1 {
			t.Fatalf("read-logs from offset 0 read %q, want exactly %q", got, part1)
		}
		offset := len(out1.String())

		// The legacy strategy: exec sh with the script on stdin and all
		// three streams. This script also lets the job go on.
		legacy, err := remotecommand.NewSPDYExecutor(cfg, "POST", gitlabURL(t, name, "exec", "build", &corev1.PodExecOptions{
			Container: "build", Command: []string{"sh"}, Stdin: true, Stdout: true, Stderr: true,
		}))
		if err != nil {
			t.Fatal(err)
		}
		var lout, lerr syncBuffer
		if err := legacy.StreamWithContext(ctx, remotecommand.StreamOptions{
			Stdin:  strings.NewReader("echo legacy-out-$((6*7))\necho legacy-err-$((6*7)) >&2\npwd\ntouch go\n"),
			Stdout: &lout, Stderr: &lerr,
		}); err != nil {
			t.Fatalf("legacy exec of sh with the script on stdin: %v (stdout %q, stderr %q)", err, lout.String(), lerr.String())
		}
		if want := "legacy-out-42\n" + buildDir + "\n"; lout.String() != want || lerr.String() != "legacy-err-42\n" {
			t.Errorf("legacy exec printed stdout %q, stderr %q; want %q (the member's build dir), %q",
				lout.String(), lerr.String(), want, "legacy-err-42\n")
		}

		// read-logs, reconnected with the last offset: exactly the rest,
		// then the runner stops reading as the job is over.
		second, err := remotecommand.NewSPDYExecutor(cfg, "POST", gitlabURL(t, name, "exec", "helper", &corev1.PodExecOptions{
			Container: "helper", Command: readLogs(offset), Stdout: true, Stderr: true,
		}))
		if err != nil {
			t.Fatal(err)
		}
		var out2, err2 syncBuffer
		secondCtx, stopSecond := context.WithCancel(ctx)
		secondDone := make(chan error, 1)
		go func() {
			secondDone <- second.StreamWithContext(secondCtx, remotecommand.StreamOptions{Stdout: &out2, Stderr: &err2})
		}()
		want := "job-line-4\njob-line-5\n" + buildDir + "\n"
		if err := waitString(ctx, &out2, want, 30*time.Second); err != nil {
			stopSecond()
			t.Fatalf("read-logs from offset %d: %v (read %q, stderr %q)", offset, err, out2.String(), err2.String())
		}
		stopSecond()
		select {
		case <-secondDone:
		case <-time.After(30 * time.Second):
			t.Fatal("the second read-logs exec did not end")
		}
		if out2.String() != want {
			t.Errorf("read-logs from offset %d read %q, want exactly %q (the rest, ending with the member's build dir)", offset, out2.String(), want)
		}
		attaches.check(t, 1)
		execs.check(t, 3)
	})

	t.Run("web terminal channel.k8s.io", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		q := "command=sh&command=-c&command=" + url.QueryEscape("echo terminal-$((6*7)); exec sh") +
			"&container=build&container=build&stdin=true&stdout=true&stderr=true&tty=1"
		s := dialGatewayWS(t, env.UserExecOnly, "/api/v1/namespaces/"+env.Namespace+"/pods/"+name+"/exec", q, []string{"channel.k8s.io"})
		if s.protocol != "channel.k8s.io" {
			t.Fatalf("negotiated subprotocol %q, want channel.k8s.io", s.protocol)
		}
		if err := s.waitText(ctx, chStdout, "terminal-42", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := s.resize(90, 20); err != nil {
			t.Fatal(err)
		}
		typed := `i=0; while [ "$(stty size)" != "20 90" ] && [ $i -lt 200 ]; do i=$((i+1)); sleep 0.05; done; echo "size=$(stty size)"; echo typed-$((6*7)); pwd; exit 5` + "\r"
		if err := s.send(chStdin, []byte(typed)); err != nil {
			t.Fatal(err)
		}
		if err := s.waitClosed(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		out := s.text(chStdout)
		for _, want := range []string{"size=20 90\r\n", "typed-42\r\n", buildDir + "\r\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("terminal output %q lacks %q", out, want)
			}
		}
		// v1 framing: the error channel carries only a failure's text.
		if msg := s.text(chError); !strings.Contains(msg, "non-zero exit code") || !strings.Contains(msg, "5") {
			t.Errorf("v1 error channel %q, want the non-zero exit code 5", msg)
		}
		if stderr := s.bytes(chStderr); len(stderr) != 0 {
			t.Errorf("a tty session wrote %q on stderr, want everything on the terminal", stderr)
		}
	})
}

// gitlabRegistrySecret creates, through the gateway as the runner does, the
// per-job Secret with the CI registry's credentials the job pod pulls with.
func gitlabRegistrySecret(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	auth := base64.StdEncoding.EncodeToString([]byte("gitlab-ci-token:job-token-not-a-secret"))
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.Namespace},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.e2e.invalid":{"auth":"` + auth + `"}}}`)},
	}
	gw := gatewayClient(t, env.UserAdmin)
	created, err := gw.CoreV1().Secrets(env.Namespace).Create(t.Context(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the registry Secret through the gateway: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = gw.CoreV1().Secrets(env.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
	return created
}
