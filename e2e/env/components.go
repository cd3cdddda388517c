package env

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/nodeagent"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
)

// NodeName is the one Node the node agent registers in member.
func NodeName(member string) string { return member + "-node" }

// startNodeAgents starts a node agent per member in this process and waits
// until every Node is Ready.
func (e *Env) startNodeAgents(ctx context.Context) error {
	for _, m := range e.opts.Members {
		if err := e.startNodeAgent(m); err != nil {
			return fmt.Errorf("node agent of %s: %w", m, err)
		}
	}
	for _, m := range e.opts.Members {
		if err := e.waitNodeReady(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (e *Env) startNodeAgent(member string) error {
	serving, err := e.ca.issue(e.pkiDir, "node-"+member, "system:node:"+NodeName(member), []string{"system:nodes"}, loopbackHosts)
	if err != nil {
		return err
	}
	client, err := e.MemberClient(member)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	agent, err := nodeagent.New(nodeagent.Options{
		Client:      client,
		NodeName:    NodeName(member),
		Listener:    l,
		ServingCert: serving.TLS,
		// Only the member apiserver's kubelet client certificate chains here in practice.
		ClientCAs: e.ca.pool,
		RootDir:   filepath.Join(e.workDir, "nodes", member),
	})
	if err != nil {
		l.Close()
		return err
	}
	return e.runComponent("nodeagent-"+member, agent.Run)
}

func (e *Env) waitNodeReady(ctx context.Context, member string) error {
	client, err := e.MemberClient(member)
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := e.ComponentErrors(); err != nil {
			return false, err
		}
		node, err := client.CoreV1().Nodes().Get(ctx, NodeName(member), metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		last = "node not Ready"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("wait for node %s in %s (%s): %w", NodeName(member), member, last, err)
	}
	return nil
}

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
