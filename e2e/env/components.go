package env

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// WaitClusterReady waits until the Cluster is Ready and a list through its
// proxy answers, which needs the APIService available, the aggregator
// trusting the aggregated apiserver, the impersonator Secret and the
// impersonation RBAC Karmada's unified-auth controller pushed to the member.
func (e *Env) WaitClusterReady(ctx context.Context, member string) error {
	client, err := kubernetes.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	rc := client.CoreV1().RESTClient()
	var last string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := e.ComponentErrors(); err != nil {
			return false, err
		}
		raw, err := rc.Get().AbsPath("/apis/cluster.karmada.io/v1alpha1/clusters", member).DoRaw(ctx)
		if err != nil {
			last = fmt.Sprintf("get cluster: %v", err)
			return false, nil
		}
		var c karmada.Cluster
		if err := json.Unmarshal(raw, &c); err != nil {
			return false, fmt.Errorf("decode Cluster %s: %w", member, err)
		}
		if ready, msg := c.Ready(); !ready {
			last = "cluster not Ready: " + msg
			return false, nil
		}
		if _, err := rc.Get().AbsPath(karmada.ClusterProxyPath(member, "/api/v1/namespaces/"+Namespace+"/pods")).DoRaw(ctx); err != nil {
			last = fmt.Sprintf("list pods through the cluster proxy: %v", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the cluster proxy of %s (%s): %w", member, last, err)
	}
	return nil
}
