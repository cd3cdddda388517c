package identity

import (
	"reflect"
	"strings"
	"testing"
)

// TestPodStreamRequests: the verbs kube-apiserver checks for a pod stream,
// in its order: the method's, plus create for a GET of exec, attach or
// portforward.
func TestPodStreamRequests(t *testing.T) {
	tests := []struct {
		method, sub string
		verbs       []string
	}{
		{"POST", "exec", []string{"create"}},
		{"GET", "exec", []string{"get", "create"}},
		{"POST", "attach", []string{"create"}},
		{"GET", "attach", []string{"get", "create"}},
		{"POST", "portforward", []string{"create"}},
		{"GET", "portforward", []string{"get", "create"}},
		{"GET", "log", []string{"get"}},
		{"POST", "log", []string{"create"}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.sub, func(t *testing.T) {
			var want []ResourceRequest
			for _, v := range tt.verbs {
				want = append(want, ResourceRequest{Namespace: "ci", Verb: v, Resource: "pods", Subresource: tt.sub, Name: "job-42"})
			}
			if got := PodStreamRequests(tt.method, "ci", "job-42", tt.sub); !reflect.DeepEqual(got, want) {
				t.Errorf("PodStreamRequests = %+v, want %+v", got, want)
			}
		})
	}
}

// TestProxySubresourceRequest: the verb RequestInfo derives from the method,
// on <resource>/proxy named by the whole segment; no verb, no request.
func TestProxySubresourceRequest(t *testing.T) {
	tests := []struct {
		method, verb string
		ok           bool
	}{
		{"GET", "get", true},
		{"HEAD", "get", true},
		{"POST", "create", true},
		{"PUT", "update", true},
		{"PATCH", "patch", true},
		{"DELETE", "delete", true},
		{"OPTIONS", "", false},
		{"CONNECT", "", false},
		{"TRACE", "", false},
	}
	for _, resource := range []string{"pods", "services"} {
		for _, tt := range tests {
			t.Run(resource+" "+tt.method, func(t *testing.T) {
				got, ok := ProxySubresourceRequest(tt.method, "ci", resource, "https:web:443")
				var want ResourceRequest
				if tt.ok {
					want = ResourceRequest{Namespace: "ci", Verb: tt.verb, Resource: resource, Subresource: "proxy", Name: "https:web:443"}
				}
				if ok != tt.ok || got != want {
					t.Errorf("ProxySubresourceRequest = %+v, %v; want %+v, %v", got, ok, want, tt.ok)
				}
			})
		}
	}
	for _, m := range strings.Split(ProxyMethods, ", ") {
		if _, ok := ProxySubresourceRequest(m, "ci", "pods", "p"); !ok {
			t.Errorf("ProxyMethods lists %s, which has no verb", m)
		}
	}
}

func TestClusterProxyRequest(t *testing.T) {
	for _, tt := range []struct{ method, verb string }{
		{"GET", "get"}, // WebSocket exec and watch=true alike: the path names the Cluster
		{"HEAD", "get"},
		{"POST", "create"}, // SPDY exec, attach, portforward
		{"PUT", "update"},
		{"PATCH", "patch"},
		{"DELETE", "delete"},
		{"OPTIONS", ""},
	} {
		got := ClusterProxyRequest(tt.method, "member1")
		want := ResourceRequest{Verb: tt.verb, Group: "cluster.karmada.io", Resource: "clusters", Subresource: "proxy", Name: "member1"}
		if got != want {
			t.Errorf("ClusterProxyRequest(%s) = %+v, want %+v", tt.method, got, want)
		}
	}
}
