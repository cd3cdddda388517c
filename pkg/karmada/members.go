package karmada

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// DefaultMemberReadTimeout bounds one metadata read through the cluster
// proxy when NewMemberMetadata is given none: it stands before an exec, so a
// hung member must fail it, not hold it.
const DefaultMemberReadTimeout = 5 * time.Second

// MemberMetadata reads objects' metadata in member clusters through
// Karmada's cluster proxy, with the identity of the config it was built
// from. It is safe for concurrent use.
type MemberMetadata struct {
	base    *rest.Config
	client  *http.Client
	timeout time.Duration

	mu      sync.Mutex
	clients map[string]metadata.Interface // by cluster name
}

// NewMemberMetadata returns a MemberMetadata calling karmada-apiserver as
// cfg does, each read bounded by timeout (0: DefaultMemberReadTimeout).
// Reads are not rate limited: each one stands for a request the caller
// already made, which is not rate limited either.
func NewMemberMetadata(cfg *rest.Config, timeout time.Duration) (*MemberMetadata, error) {
	if timeout <= 0 {
		timeout = DefaultMemberReadTimeout
	}
	base := rest.CopyConfig(cfg)
	base.QPS, base.Burst, base.RateLimiter = -1, 0, nil
	client, err := rest.HTTPClientFor(base)
	if err != nil {
		return nil, fmt.Errorf("member metadata client: %w", err)
	}
	return &MemberMetadata{base: base, client: client, timeout: timeout, clients: map[string]metadata.Interface{}}, nil
}

// Metadata GETs namespace/name of resource in cluster as
// PartialObjectMetadata, from the member's watch cache (resourceVersion=0).
// Errors from the member or the cluster proxy are returned as client-go
// gives them (apierrors for Status answers).
func (m *MemberMetadata) Metadata(ctx context.Context, cluster string, resource schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	c, err := m.clusterClient(cluster)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	return c.Resource(resource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
}

// clusterClient returns the metadata client whose base URL is cluster's
// proxy. Clients share one HTTP client, so one connection pool.
func (m *MemberMetadata) clusterClient(cluster string) (metadata.Interface, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clients[cluster]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(m.base)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + ClusterProxyPath(cluster, "")
	c, err := metadata.NewForConfigAndClient(cfg, m.client)
	if err != nil {
		return nil, fmt.Errorf("member metadata client for cluster %q: %w", cluster, err)
	}
	m.clients[cluster] = c
	return c, nil
}
