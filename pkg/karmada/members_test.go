package karmada

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestMemberMetadata checks the read the resolver makes before the gateway
// acts as itself: a metadata-only GET below the named cluster's proxy, from
// the member's watch cache, with the gateway's credential.
func TestMemberMetadata(t *testing.T) {
	type seen struct{ path, query, accept, auth string }
	got := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.Path, r.URL.RawQuery, r.Header.Get("Accept"), r.Header.Get("Authorization")}
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.URL.Path, "/missing") {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(apierrors.NewNotFound(PodGVR.GroupResource(), "missing").Status())
			return
		}
		_ = json.NewEncoder(w).Encode(metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "e2e", Name: "victim", Annotations: map[string]string{TemplateUIDAnnotation: "t-uid"}},
		})
	}))
	defer srv.Close()

	m, err := NewMemberMetadata(&rest.Config{Host: srv.URL + "/", BearerToken: "gateway-token"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := m.Metadata(context.Background(), "member1", PodGVR, "e2e", "victim")
	if err != nil || obj.Annotations[TemplateUIDAnnotation] != "t-uid" {
		t.Fatalf("Metadata() = %+v, %v", obj, err)
	}
	s := <-got
	if want := "/apis/cluster.karmada.io/v1alpha1/clusters/member1/proxy/api/v1/namespaces/e2e/pods/victim"; s.path != want {
		t.Errorf("path %q, want %q", s.path, want)
	}
	if s.query != "resourceVersion=0" || !strings.Contains(s.accept, "as=PartialObjectMetadata") || s.auth != "Bearer gateway-token" {
		t.Errorf("request %+v: want resourceVersion=0, a PartialObjectMetadata Accept and the gateway's token", s)
	}

	if _, err := m.Metadata(context.Background(), "member2", ServiceGVR, "e2e", "missing"); !apierrors.IsNotFound(err) {
		t.Fatalf("Metadata(missing) error = %v, want NotFound", err)
	}
	if s := <-got; s.path != "/apis/cluster.karmada.io/v1alpha1/clusters/member2/proxy/api/v1/namespaces/e2e/services/missing" {
		t.Errorf("second cluster's path %q", s.path)
	}
}
