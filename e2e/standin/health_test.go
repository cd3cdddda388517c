package standin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestReadyzProbe(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			_, _ = w.Write([]byte("ok"))
		case "/version":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"gitVersion":"v1.37.2"}`))
		}
	}))
	defer ok.Close()
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
	}))
	defer sick.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()

	for _, tc := range []struct {
		name, url, reason, message, version string
		ready                               bool
	}{
		{"ready", ok.URL, clusterReadyReason, clusterReadyMessage, "v1.37.2", true},
		{"readyz failing", sick.URL, clusterNotReadyReason, "answered 500", "", false},
		{"unreachable", downURL, clusterNotReachableReason, "cluster is not reachable: ", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, err := kubernetes.NewForConfig(&rest.Config{Host: tc.url})
			if err != nil {
				t.Fatal(err)
			}
			version, res := readyzProbe(client)(context.Background())
			if res.ready != tc.ready || res.reason != tc.reason || !strings.Contains(res.message, tc.message) || version != tc.version {
				t.Fatalf("probe = %q %+v, want ready=%v %s %q %q", version, res, tc.ready, tc.reason, tc.message, tc.version)
			}
		})
	}

	store := newClusterStore()
	store.add("member1", testSpec("member1"))
	probeAll(context.Background(), store, map[string]healthProbe{"member1": readyzProbe(mustClient(t, ok.URL))})
	if !store.ready("member1") {
		t.Fatal("member1 not Ready after a good probe")
	}
	_, rv := store.list()
	probeAll(context.Background(), store, map[string]healthProbe{"member1": readyzProbe(mustClient(t, ok.URL))})
	if _, rv2 := store.list(); rv2 != rv {
		t.Errorf("an unchanged probe bumped resourceVersion %d -> %d", rv, rv2)
	}
	probeAll(context.Background(), store, map[string]healthProbe{"member1": readyzProbe(mustClient(t, downURL))})
	c, _ := store.get("member1")
	if ready, msg := c.Ready(); ready || !strings.Contains(msg, "not reachable") {
		t.Errorf("after failed probe Ready=%v %q", ready, msg)
	}
}

func mustClient(t *testing.T, url string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: url})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
