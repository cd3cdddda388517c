package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/labeler"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/serving"
)

type noStreams struct{}

func (noStreams) Shutdown(context.Context) error { return nil }

// replica is one gateway's lifecycle with a real labeler on a Lease shared
// through kube, its servers on loopback.
func replica(t *testing.T, kube *kubefake.Clientset, id string) (*lifecycle, net.Listener) {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	md := metadatafake.NewSimpleMetadataClient(scheme)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		karmada.ResourceBindingGVR: "ResourceBindingList",
		karmada.ClusterGVR:         "ClusterList",
	})
	inf, err := karmada.NewInformers(karmada.InformersOptions{Metadata: md, Dynamic: dyn})
	if err != nil {
		t.Fatal(err)
	}
	// The chart's lease duration; a retry period short enough that the
	// failover is measured, not the retry's jitter (up to 2.2 periods).
	lab, err := labeler.New(labeler.Options{
		Informers: inf, Client: kube, Metrics: metrics.New(prometheus.NewRegistry()),
		LeaderElection: true, LeaseNamespace: "gateway", LeaseName: "labeler", Identity: id,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	proxyLn := listen()
	return &lifecycle{
		health:  newHealth(func() bool { return true }, nil),
		proxy:   server{serving.NewServer(serving.ServerOptions{Handler: http.NotFoundHandler()}), proxyLn},
		metrics: server{serving.NewServer(serving.ServerOptions{Handler: http.NotFoundHandler()}), listen()},
		streams: noStreams{},
		labeler: lab,
		grace:   10 * time.Second,
		start:   inf.Start,
	}, proxyLn
}

func leaseHolder(t *testing.T, kube *kubefake.Clientset) string {
	t.Helper()
	lease, err := kube.CoordinationV1().Leases("gateway").Get(context.Background(), "labeler", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

func waitHolder(t *testing.T, kube *kubefake.Clientset, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, within, true, func(context.Context) (bool, error) {
		return leaseHolder(t, kube) == want, nil
	}); err != nil {
		t.Fatalf("lease held by %q after %s, want %q", leaseHolder(t, kube), within, want)
	}
	return time.Since(start)
}

// TestFailedPartReleasesLease: the proxy server of the replica holding the
// labeler's Lease fails (its listener closed under it). The replica drains
// as on SIGTERM, its labeler releases the Lease, and the other replica
// takes over in under 3 s instead of the 15 s lease duration. The former
// run (mutation tried: fail not cancelling ctx, run returning the first
// error before the drain, and the process going on without cancelling, as
// os.Exit does) leaves the Lease held by a and fails this test.
func TestFailedPartReleasesLease(t *testing.T) {
	kube := kubefake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	a, aProxy := replica(t, kube, "a")
	aDone := make(chan error, 1)
	go func() { aDone <- a.run(ctx) }()
	waitHolder(t, kube, "a", 10*time.Second)

	b, _ := replica(t, kube, "b")
	bDone := make(chan error, 1)
	go func() { bDone <- b.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-bDone
	})

	aProxy.Close() // a's proxy server fails
	took := waitHolder(t, kube, "b", 3*time.Second)
	t.Logf("replica b took the lease %s after replica a's proxy server failed", took)

	select {
	case err := <-aDone:
		if err == nil || !strings.Contains(err.Error(), "proxy server") {
			t.Errorf("replica a returned %v, want its proxy server's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("replica a did not return after its proxy server failed")
	}
}

// openStreams is a drain step for streams that stay open past any grace
// period, as a CI job's exec does: it returns only when its deadline cuts
// them.
type openStreams struct{}

func (openStreams) Shutdown(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestGraceEndedWithOpenStreamsIsNoFailure: a SIGTERM whose grace period
// ends with streams still open (a rollout under long CI jobs) ends them,
// and the gateway returns no error: it used to log "gateway failed ...
// context deadline exceeded" and exit 1, like a crash. A part that failed
// is still an error (TestFailedPartReleasesLease).
func TestGraceEndedWithOpenStreamsIsNoFailure(t *testing.T) {
	kube := kubefake.NewClientset()
	a, _ := replica(t, kube, "a")
	a.streams, a.grace = openStreams{}, 300*time.Millisecond
	ctx, sigterm := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	waitHolder(t, kube, "a", 10*time.Second)
	sigterm()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after a grace period that ended with open streams: %v, want no error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its grace period")
	}
}
