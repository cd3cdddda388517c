// Package memberaccesstest builds memberaccess.Members for other packages'
// tests: real Members, reading Clusters and Secrets given up front.
package memberaccesstest

import (
	"context"
	"encoding/pem"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/memberaccess"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// SecretNamespace holds the members' Secrets, as karmadactl join puts them.
const SecretNamespace = "karmada-cluster"

// Member is a member cluster as its Cluster object and Secrets describe
// it.
type Member struct {
	Name string
	// Server is the member's kube-apiserver; its certificate is the
	// caBundle.
	Server *httptest.Server
	// Token is the impersonator's token; NoImpersonator leaves
	// impersonatorSecretRef out.
	Token          string
	NoImpersonator bool
	// ProxyURL is spec.proxyURL.
	ProxyURL string
}

// New is Members reaching members, started until the test ends.
func New(t testing.TB, met *metrics.Metrics, members ...Member) *memberaccess.Members {
	t.Helper()
	source := fcache.NewFakeControllerSource()
	var secrets []*corev1.Secret
	for _, m := range members {
		c := &karmada.Cluster{ObjectMeta: metav1.ObjectMeta{Name: m.Name}, Spec: karmada.ClusterSpec{
			APIEndpoint: m.Server.URL,
			SecretRef:   &karmada.LocalSecretRef{Namespace: SecretNamespace, Name: m.Name},
			ProxyURL:    m.ProxyURL,
		}}
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Server.Certificate().Raw})
		secrets = append(secrets, secret(m.Name, map[string][]byte{"caBundle": ca}))
		if !m.NoImpersonator {
			c.Spec.ImpersonatorSecretRef = &karmada.LocalSecretRef{Namespace: SecretNamespace, Name: m.Name + "-impersonator"}
			secrets = append(secrets, secret(m.Name+"-impersonator", map[string][]byte{"token": []byte(m.Token)}))
		}
		source.Add(c)
	}
	clusters := cache.NewSharedIndexInformer(source, &karmada.Cluster{}, 0, cache.Indexers{})
	kube := kubefake.NewClientset()
	for _, s := range secrets {
		if err := kube.Tracker().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := memberaccess.New(memberaccess.Options{Clusters: clusters, Client: kube, Metrics: met})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go clusters.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), clusters.HasSynced) {
		t.Fatal("Cluster informer did not sync")
	}
	ms.Start(ctx)
	return ms
}

func secret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: SecretNamespace, Name: name}, Data: data}
}
