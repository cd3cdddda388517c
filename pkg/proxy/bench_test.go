package proxy

// Benchmarks of what the gateway costs per request and per stream byte, on
// the real topology in miniature: TLS client -> TLS gateway -> TLS upstream,
// HTTP/2 where client-go uses it (ordinary requests on both hops) and
// HTTP/1.1 for upgrades. Every benchmark has a "direct" twin that sends the
// same requests to the upstream itself; the difference is the gateway.
// At -cpu 1 a sequential benchmark's ns/op is close to the CPU all three
// parties spend per request, so gateway minus direct approximates the
// gateway's own CPU per request.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/proxy/proxytest"
)

const (
	benchPodPath  = "/api/v1/namespaces/ci/pods/runner-abc123-project-42-concurrent-0"
	benchListPath = "/api/v1/namespaces/ci/pods"
	benchExecPath = "/api/v1/namespaces/ci/pods/runner-abc123-project-42-concurrent-0/exec?command=sh&stdin=true&stdout=true"
	benchListLen  = 1000
	// benchStreamChunk is what one stream op moves: large enough that the
	// per-op round trip is noise next to the bytes.
	benchStreamChunk = 4 << 20
)

// benchPod is a CI job pod as karmada-apiserver returns it (about 3 KiB of
// JSON), managed fields included.
func benchPod(i int) *corev1.Pod {
	name := "runner-abc123-project-42-concurrent-" + strconv.Itoa(i)
	ts := metav1.NewTime(time.Date(2026, 12, 2, 17, 6, 0, 0, time.UTC))
	container := func(n string) corev1.Container {
		return corev1.Container{
			Name: n, Image: "registry.gitlab.com/gitlab-org/gitlab-runner/gitlab-runner-helper:x86_64-v17.0.0",
			Command: []string{"sh", "-c", "if [ -x /usr/local/bin/bash ]; then exec /usr/local/bin/bash; fi"},
			Env: []corev1.EnvVar{
				{Name: "CI_PROJECT_DIR", Value: "/builds/group/project"}, {Name: "CI_JOB_ID", Value: "123456789"},
				{Name: "FF_USE_POWERSHELL_PATH_RESOLVER", Value: "false"}, {Name: "CI_SERVER", Value: "yes"},
			},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi"),
			}},
			VolumeMounts: []corev1.VolumeMount{{Name: "repo", MountPath: "/builds"}, {Name: "scripts", MountPath: "/scripts-42-123456789"}},
			Stdin:        true,
		}
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ci", UID: "6f9d1c3e-2a4b-4c5d-8e7f-0a1b2c3d4e5f", ResourceVersion: "123456789",
			CreationTimestamp: ts,
			Labels:            map[string]string{"pod": name, "project.runner.gitlab.com/id": "42", "cluster.karmada.io/name": proxytest.Cluster},
			Annotations:       map[string]string{"job.runner.gitlab.com/url": "https://gitlab.example.com/group/project/-/jobs/123456789"},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "gitlab-runner", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &ts,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:pod":{}}},"f:spec":{"f:containers":{}}}`)},
			}},
		},
		Spec: corev1.PodSpec{
			Containers:    []corev1.Container{container("build"), container("helper")},
			RestartPolicy: corev1.RestartPolicyNever,
			Volumes:       []corev1.Volume{{Name: "repo", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.244.1.17", HostIP: "172.18.0.3", StartTime: &ts,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ts}},
		},
	}
}

// benchAPI answers a pod GET and a pods LIST as kube-apiserver does: the
// GET in one write (its length known), the LIST written in pieces with no
// length, and upgrades on any other path with benchStreamer.
type benchAPI struct {
	pod, list []byte
}

func newBenchAPI(t testing.TB) *benchAPI {
	pod, err := json.Marshal(benchPod(0))
	if err != nil {
		t.Fatal(err)
	}
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "123456790"}}
	for i := range benchListLen {
		list.Items = append(list.Items, *benchPod(i))
	}
	listJSON, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return &benchAPI{pod: pod, list: listJSON}
}

func (a *benchAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "" {
		serveBenchStream(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Audit-Id", "2b1c0d7e-3f4a-4b5c-9d8e-7f6a5b4c3d2e")
	switch r.URL.Path {
	case benchPodPath:
		w.Header().Set("Content-Length", strconv.Itoa(len(a.pod)))
		_, _ = w.Write(a.pod)
	case benchListPath:
		for rest := a.list; len(rest) > 0; {
			n := min(len(rest), 64<<10)
			_, _ = w.Write(rest[:n])
			rest = rest[n:]
		}
	default:
		http.NotFound(w, r)
	}
}

// serveBenchStream is an upgraded stream's far end: for each command byte
// 'o' it writes benchStreamChunk bytes (stdout), for 'i' it reads
// benchStreamChunk bytes and answers one byte (stdin).
func serveBenchStream(w http.ResponseWriter) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
	out := make([]byte, 32<<10)
	for {
		cmd, err := brw.ReadByte()
		if err != nil {
			return
		}
		switch cmd {
		case 'o':
			for n := 0; n < benchStreamChunk; n += len(out) {
				if _, err := conn.Write(out); err != nil {
					return
				}
			}
		case 'i':
			if _, err := io.CopyN(io.Discard, brw, benchStreamChunk); err != nil {
				return
			}
			if _, err := conn.Write([]byte{'k'}); err != nil {
				return
			}
		}
	}
}

// benchServer starts h over TLS offering h2 and http/1.1, as
// karmada-apiserver and the gateway do.
func benchServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// benchTargets are the upstream and the gateway in front of it.
type benchTargets struct {
	upstream, gateway *httptest.Server
}

func newBenchTargets(t testing.TB) benchTargets {
	upstream := benchServer(t, newBenchAPI(t))
	p := newTestProxy(t, Options{Upstream: tlsUpstreamConfig(upstream)})
	// Every goroutine of the gateway's server, its handlers and its
	// upstream connections inherits this label, so a CPU profile tells the
	// gateway's own share apart: go tool pprof -tagfocus party=gateway.
	var gateway *httptest.Server
	pprof.Do(context.Background(), pprof.Labels("party", "gateway"), func(context.Context) {
		gateway = benchServer(t, p)
	})
	return benchTargets{upstream: upstream, gateway: gateway}
}

func (bt benchTargets) each(b *testing.B, f func(b *testing.B, srv *httptest.Server)) {
	b.Run("direct", func(b *testing.B) { f(b, bt.upstream) })
	b.Run("gateway", func(b *testing.B) { f(b, bt.gateway) })
}

// benchClient is a client of srv speaking HTTP/2 (client-go) or HTTP/1.1.
func benchClient(srv *httptest.Server, http2 bool) *http.Client {
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = http2
	tr.MaxIdleConnsPerHost = 100
	tr.TLSClientConfig.NextProtos = nil
	if !http2 {
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr}
}

func benchGet(b *testing.B, c *http.Client, url string, buf []byte) {
	res, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{res.Body}, buf)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || n == 0 {
		b.Fatalf("GET %s: %d, %d bytes, %v", url, res.StatusCode, n, err)
	}
}

func benchRequests(b *testing.B, bt benchTargets, path string, http2 bool, parallelism int) {
	bt.each(b, func(b *testing.B, srv *httptest.Server) {
		c := benchClient(srv, http2)
		defer c.CloseIdleConnections()
		url := srv.URL + path
		benchGet(b, c, url, make([]byte, 32<<10)) // connections up before timing
		b.ReportAllocs()
		defer reportCPU(b)()
		if parallelism == 0 {
			buf := make([]byte, 32<<10)
			for b.Loop() {
				benchGet(b, c, url, buf)
			}
			return
		}
		b.SetParallelism(parallelism)
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 32<<10)
			for pb.Next() {
				benchGet(b, c, url, buf)
			}
		})
	})
}

// BenchmarkPassthroughGET is one pod GET at a time: client-go's HTTP/2, and
// HTTP/1.1 as some executors' clients send.
func BenchmarkPassthroughGET(b *testing.B) {
	bt := newBenchTargets(b)
	b.Run("h2", func(b *testing.B) { benchRequests(b, bt, benchPodPath, true, 0) })
	b.Run("h1", func(b *testing.B) { benchRequests(b, bt, benchPodPath, false, 0) })
}

// BenchmarkPassthroughGETParallel is 16 concurrent GETs per GOMAXPROCS on
// one HTTP/2 connection per client, as one client-go process sends them.
func BenchmarkPassthroughGETParallel(b *testing.B) {
	bt := newBenchTargets(b)
	benchRequests(b, bt, benchPodPath, true, 16)
}

// BenchmarkPassthroughLIST is a LIST of benchListLen pods (about 3 MiB).
func BenchmarkPassthroughLIST(b *testing.B) {
	bt := newBenchTargets(b)
	b.Run("h2", func(b *testing.B) { benchRequests(b, bt, benchListPath, true, 0) })
}

// benchStream is one upgraded connection to srv, past its 101.
type benchStream struct {
	conn net.Conn
	br   *bufio.Reader
}

func openBenchStream(t testing.TB, srv *httptest.Server) *benchStream {
	t.Helper()
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.WriteString(conn, "POST "+benchExecPath+" HTTP/1.1\r\nHost: gateway.test\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	return &benchStream{conn: conn, br: br}
}

func (s *benchStream) stdout(b *testing.B) {
	if _, err := s.conn.Write([]byte{'o'}); err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, s.br, benchStreamChunk); err != nil {
		b.Fatal(err)
	}
}

func (s *benchStream) stdin(b *testing.B, chunk []byte) {
	if _, err := s.conn.Write([]byte{'i'}); err != nil {
		b.Fatal(err)
	}
	for n := 0; n < benchStreamChunk; n += len(chunk) {
		if _, err := s.conn.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if ack, err := s.br.ReadByte(); err != nil || ack != 'k' {
		b.Fatalf("ack %q %v", ack, err)
	}
}

// BenchmarkUpgradeCopy is the throughput of one upgraded (SPDY or
// WebSocket: the gateway copies both as opaque bytes) stream, per
// direction.
func BenchmarkUpgradeCopy(b *testing.B) {
	bt := newBenchTargets(b)
	for _, dir := range []string{"stdout", "stdin"} {
		b.Run(dir, func(b *testing.B) {
			bt.each(b, func(b *testing.B, srv *httptest.Server) {
				s := openBenchStream(b, srv)
				defer s.conn.Close()
				chunk := make([]byte, 32<<10)
				b.SetBytes(benchStreamChunk)
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					if dir == "stdout" {
						s.stdout(b)
					} else {
						s.stdin(b, chunk)
					}
				}
			})
		})
	}
}

// BenchmarkUpgradeSessions holds benchSessions idle upgraded streams open
// and reports the live memory (heap and goroutine stacks) they cost per
// session, gateway minus direct: the gateway's own share.
func BenchmarkUpgradeSessions(b *testing.B) {
	const sessions = 500
	bt := newBenchTargets(b)
	var perSession [2]float64
	for i, srv := range []*httptest.Server{bt.upstream, bt.gateway} {
		goroutines := runtime.NumGoroutine()
		before := liveMemory()
		streams := make([]*benchStream, sessions)
		for j := range streams {
			streams[j] = openBenchStream(b, srv)
		}
		perSession[i] = float64(liveMemory()-before) / sessions
		for _, s := range streams {
			s.conn.Close()
		}
		// The next measurement starts once these sessions are torn down.
		for runtime.NumGoroutine() > goroutines {
			runtime.Gosched()
		}
	}
	for b.Loop() {
	}
	b.ReportMetric(perSession[1]-perSession[0], "gateway-B/session")
	b.ReportMetric(perSession[0], "direct-B/session")
}

// reportCPU resets the timer and returns a func that reports the process's
// CPU time (user and system: client, gateway and upstream together) per op.
// On a machine shared with other work, CPU per op moves far less than
// ns/op, which also counts waiting for a core.
func reportCPU(b *testing.B) func() {
	start := processCPU(b)
	b.ResetTimer()
	return func() {
		b.StopTimer()
		b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func liveMemory() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// benchEventsAPI is karmada-apiserver answering a pod-scoped events list
// with a few of Karmada's own events and the pod template, with the cluster
// proxy of proxytest.Cluster behind it answering the member's events for the pod:
// benchMemberEvents of them, as kube-apiserver writes them.
type benchEventsAPI struct {
	karmadaList, template, memberList []byte
}

const benchMemberEvents = 500

func newBenchEventsAPI(t testing.TB) *benchEventsAPI {
	ts := metav1.NewTime(time.Date(2026, 12, 2, 17, 6, 0, 0, time.UTC))
	event := func(i int, name, uid, rv string) corev1.Event {
		return corev1.Event{
			ObjectMeta: metav1.ObjectMeta{
				Name: name + "." + strconv.FormatInt(int64(0x187d2c3a4b5c6d00+i), 16), Namespace: "ci", UID: types.UID(fmt.Sprintf("9d3c2b1a-0000-4000-8000-%012d", i)),
				ResourceVersion: rv, CreationTimestamp: ts,
			},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ci", Name: "build", UID: types.UID(uid), APIVersion: "v1", ResourceVersion: "4600", FieldPath: "spec.containers{build}"},
			Reason:         "Pulled", Message: `Successfully pulled image "registry.gitlab.com/group/project/build:latest" in 1.234s (1.234s including waiting). Image size: 123456789 bytes.`,
			Source:         corev1.EventSource{Component: "kubelet", Host: "member1-worker"},
			FirstTimestamp: ts, LastTimestamp: ts, Count: 1, Type: corev1.EventTypeNormal,
			ReportingController: "kubelet", ReportingInstance: "member1-worker",
		}
	}
	marshal := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	karmadaList := corev1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "4711"}}
	for i := range 3 {
		karmadaList.Items = append(karmadaList.Items, event(i, "build", "template-uid", "4700"))
	}
	memberList := corev1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "99"}}
	for i := range benchMemberEvents {
		memberList.Items = append(memberList.Items, event(i, "build", "member-uid", strconv.Itoa(100+i)))
	}
	return &benchEventsAPI{
		karmadaList: marshal(karmadaList),
		template:    marshal(benchPod(0)),
		memberList:  marshal(memberList),
	}
}

var benchMemberEventsPath = karmada.ClusterProxyPath(proxytest.Cluster, "/api/v1/namespaces/ci/events")

func (a *benchEventsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	switch r.URL.Path {
	case "/api/v1/namespaces/ci/events":
		body = a.karmadaList
	case "/api/v1/namespaces/ci/pods/build":
		body = a.template
	case benchMemberEventsPath:
		body = a.memberList
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// BenchmarkEventsList is the pod-scoped events list GitLab Runner sends:
// through the gateway, which merges karmada-apiserver's list with the
// member's, against the member's list alone through the cluster proxy
// (what a patched executor would read).
func BenchmarkEventsList(b *testing.B) {
	upstream := benchServer(b, newBenchEventsAPI(b))
	p := newTestProxy(b, withMemberEvents(Options{Upstream: tlsUpstreamConfig(upstream)}))
	var gateway *httptest.Server
	pprof.Do(context.Background(), pprof.Labels("party", "gateway"), func(context.Context) {
		gateway = benchServer(b, p)
	})
	query := "?fieldSelector=" + url.QueryEscape("involvedObject.name=build")
	for _, target := range []struct {
		name string
		srv  *httptest.Server
		path string
	}{
		{"direct", upstream, benchMemberEventsPath + query},
		{"gateway", gateway, "/api/v1/namespaces/ci/events" + query},
	} {
		b.Run(target.name, func(b *testing.B) {
			c := benchClient(target.srv, true)
			defer c.CloseIdleConnections()
			url := target.srv.URL + target.path
			buf := make([]byte, 32<<10)
			benchGet(b, c, url, buf)
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				benchGet(b, c, url, buf)
			}
		})
	}
}

// BenchmarkUpgradeOpen opens one upgraded stream per op, each on a new
// TLS connection as kubectl and client-go's executors open them, and
// closes it: what an executor's short exec costs the gateway besides its
// bytes (the client's TLS handshake, the passthrough admission GET, the
// upstream connection and its handshake, the 101).
func BenchmarkUpgradeOpen(b *testing.B) {
	bt := newBenchTargets(b)
	bt.each(b, func(b *testing.B, srv *httptest.Server) {
		openBenchStream(b, srv).conn.Close() // the upstream's first connection up before timing
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			openBenchStream(b, srv).conn.Close()
		}
	})
}
