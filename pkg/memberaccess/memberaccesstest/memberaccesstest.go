// Package memberaccesstest builds memberaccess.Members for other packages'
// tests: real Members, reading Clusters given up front and the Secret
// gateway member-trust would publish for them.
package memberaccesstest

import (
	"context"
	"encoding/pem"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/memberaccess"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/membertrust"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// SecretNamespace holds the members' Secrets, as karmadactl join puts them,
// and the published one.
const SecretNamespace = "karmada-cluster"

// Published is the Secret the Members read.
var Published = types.NamespacedName{Namespace: SecretNamespace, Name: "karmada-exec-gateway-member-trust"}

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
	published := map[string][]byte{}
	for _, m := range members {
		c := &karmada.Cluster{ObjectMeta: metav1.ObjectMeta{Name: m.Name}, Spec: karmada.ClusterSpec{
			APIEndpoint: m.Server.URL,
			SecretRef:   &karmada.LocalSecretRef{Namespace: SecretNamespace, Name: m.Name},
			ProxyURL:    m.ProxyURL,
		}}
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Server.Certificate().Raw})
		published[membertrust.CABundleOf(m.Name)] = ca
		if !m.NoImpersonator {
			c.Spec.ImpersonatorSecretRef = &karmada.LocalSecretRef{Namespace: SecretNamespace, Name: m.Name + "-impersonator"}
			published[membertrust.TokenOf(m.Name)] = []byte(m.Token)
		}
		source.Add(c)
	}
	clusters := cache.NewSharedIndexInformer(source, &karmada.Cluster{}, 0, cache.Indexers{})
	kube := kubefake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: Published.Namespace, Name: Published.Name}, Data: published})
	ms, err := memberaccess.New(memberaccess.Options{Clusters: clusters, Client: kube, Published: Published, Metrics: met})
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
