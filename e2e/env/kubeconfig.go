package env

import (
	"fmt"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig is the path of user's kubeconfig for karmada-apiserver itself
// (what an executor uses today, and what fails for exec without the gateway).
func (e *Env) Kubeconfig(user string) string {
	return filepath.Join(e.workDir, "kubeconfigs", user+".karmada.yaml")
}

// GatewayKubeconfig is the path of user's kubeconfig for the gateway. It is
// written when the gateway first starts.
func (e *Env) GatewayKubeconfig(user string) string {
	return filepath.Join(e.workDir, "kubeconfigs", user+".gateway.yaml")
}

// MemberKubeconfig is the path of the admin kubeconfig for member.
func (e *Env) MemberKubeconfig(member string) string {
	return filepath.Join(e.workDir, "kubeconfigs", member+".admin.yaml")
}

func (e *Env) writeKubeconfigs() error {
	for _, u := range Users {
		if err := e.writeKubeconfig(e.Kubeconfig(u), KarmadaName, e.karmada.url(), u); err != nil {
			return err
		}
	}
	for _, m := range e.clusters() {
		if err := e.writeKubeconfig(e.MemberKubeconfig(m), m, e.members[m].url(), UserAdmin); err != nil {
			return err
		}
		if p := e.pull[m]; p != nil {
			// The host's kubectl reaches a Pull member through its proxy;
			// the member's own processes dial it inside its namespace.
			cfg, err := clientcmd.LoadFromFile(e.MemberKubeconfig(m))
			if err != nil {
				return err
			}
			if err := clientcmd.WriteToFile(*cfg, e.memberLocalKubeconfig(m)); err != nil {
				return err
			}
			cfg.Clusters[m].ProxyURL = p.proxyURL().String()
			if err := clientcmd.WriteToFile(*cfg, e.MemberKubeconfig(m)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *Env) writeGatewayKubeconfigs(url string) error {
	for _, u := range Users {
		if err := e.writeKubeconfig(e.GatewayKubeconfig(u), "gateway", url, u); err != nil {
			return err
		}
	}
	return nil
}

// writeKubeconfig writes a kubeconfig with the CA embedded, the user's token
// and namespace e2e as the default, so `kubectl exec pod` needs no -n.
func (e *Env) writeKubeconfig(path, cluster, server, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: e.CAPEM()}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: e.tokens[user]}
	name := user + "@" + cluster
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user, Namespace: Namespace}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// ClusterProxyKubeconfig writes (once) and returns a kubeconfig for user
// whose server is member's cluster proxy in karmada-apiserver: the path the
// gateway rewrites to, taken by hand.
func (e *Env) ClusterProxyKubeconfig(member, user string) (string, error) {
	path := filepath.Join(e.workDir, "kubeconfigs", user+".proxy-"+member+".yaml")
	server := e.karmada.url() + "/apis/cluster.karmada.io/v1alpha1/clusters/" + member + "/proxy"
	if err := e.writeKubeconfig(path, "proxy-"+member, server, user); err != nil {
		return "", err
	}
	return path, nil
}
