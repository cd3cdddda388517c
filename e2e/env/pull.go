package env

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Pull-mode members, as a user's edge or on-premises clusters are: the
// control plane cannot reach their kube-apiserver, karmada-agent inside the
// member registers it and reports its status, and Karmada's cluster proxy
// reaches it only through the proxy the Cluster's spec.proxyURL names.
//
// Each Pull member runs in a network namespace of its own (`ip netns`): its
// kube-apiserver, kubelet, containerd, kube-scheduler, kube-controller-manager
// and karmada-agent all listen on the namespace's loopback, and its pods hang
// on a bridge inside it. A veth pair links the namespace to the host on a /24
// of its own (a claimed slot of 198.18.0.0/16): on the host end (.1) the
// member's processes dial out, the kube-apiserver to the shared etcd (which
// listens there too, the member's data under its prefix) and the agent to a
// forwarder to karmada-apiserver (whose serving certificate names that
// address), and the namespace end (.2) carries Debian's tinyproxy, an HTTP
// CONNECT proxy and the one way in. The Cluster's spec.apiEndpoint is
// https://127.0.0.1:<port>, which is the member's apiserver only inside the
// namespace: dialed from the host it is the host's loopback, where nothing
// of the member listens.
//
// Why tinyproxy and not apiserver-network-proxy: ANP's HTTP-CONNECT frontend
// (proxy-server --mode=http-connect) requires a client certificate on the
// CONNECT hop, and Karmada's cluster proxy dials spec.proxyURL with plain
// net/http proxying (pkg/util/proxy), which presents none; Karmada's own ANP
// guide uses a fork adding a plain listener. An HTTP CONNECT proxy is what
// the field means, and tinyproxy is one from Debian with no restriction on
// CONNECT ports when no ConnectPort line is given. Options.PullProxies
// "socks5" puts Debian's Dante server (danted) there instead: spec.proxyURL
// may also be socks5://, which Karmada dials with golang.org/x/net/proxy.

// karmadaAgent is the agent's binary in BinDir/karmada (hack/build-karmada.sh).
const karmadaAgent = "agent"

// Identity of the agent in karmada-apiserver, as `karmadactl register`
// issues it (a client certificate for system:karmada:agent:<cluster> in
// system:karmada:agents).
const (
	agentGroup      = "system:karmada:agents"
	agentUserPrefix = "system:karmada:agent:"
)

// netnsPrefix starts the name of every Pull member's network namespace.
const netnsPrefix = "kegwp"

// netnsPath is where `ip netns` keeps the namespace name.
func netnsPath(name string) string { return filepath.Join("/run/netns", name) }

// pullMember is one Pull-mode member's namespace, link and processes.
type pullMember struct {
	name string
	link *netSlot
	// netns is the namespace's name (under /run/netns).
	netns string
	// karmadaForward listens on the host end of the link.
	karmadaForward *forwarder
	proxyPort      int
	// proxyScheme is spec.proxyURL's scheme: http or socks5.
	proxyScheme  string
	proxy, agent *process
}

// hostAddr is the host end of the link: etcd and the forwarder to
// karmada-apiserver listen there.
func (p *pullMember) hostAddr() netip.Addr { return p.link.gateway() }

// nsAddr is the namespace end of the link: the proxy listens there.
func (p *pullMember) nsAddr() netip.Addr { return p.link.gateway().Next() }

// proxyURL is the Cluster's spec.proxyURL.
func (p *pullMember) proxyURL() *url.URL {
	scheme := p.proxyScheme
	if scheme == "" {
		scheme = "http"
	}
	return &url.URL{Scheme: scheme, Host: netip.AddrPortFrom(p.nsAddr(), uint16(p.proxyPort)).String()}
}

// The proxies a Pull member can be reached through (Options.PullProxies):
// Debian's tinyproxy for HTTP CONNECT, Debian's Dante server for SOCKS5,
// the two kinds of spec.proxyURL Karmada's cluster proxy dials for plain
// and upgraded requests alike (pkg/util/proxy).
const (
	tinyproxyBin = "/usr/bin/tinyproxy"
	dantedBin    = "/usr/sbin/danted"
)

// pullProxyBinary is the proxy binary for a kind of Options.PullProxies.
func pullProxyBinary(kind string) (string, error) {
	switch kind {
	case "", "http":
		return tinyproxyBin, nil
	case "socks5":
		return dantedBin, nil
	}
	return "", fmt.Errorf("PullProxies: proxy kind %q, want http or socks5", kind)
}

// deleteStaleNetns deletes the namespaces named after the slot: a free slot
// with a namespace was left by an environment that died without teardown.
func (s *netSlot) deleteStaleNetns() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), fmt.Sprintf("%s%d-", netnsPrefix, s.index)) {
			_ = ip("netns", "del", e.Name())
		}
	}
}

// netnsOf is the network namespace member's processes run in ("" for the
// host's).
func (e *Env) netnsOf(member string) string {
	if p := e.pull[member]; p != nil {
		return p.netns
	}
	return ""
}

// isPull reports whether member joins in Pull mode.
func (e *Env) isPull(member string) bool { return e.pull[member] != nil }

// newPullMembers claims each Pull member's link slot and creates its
// namespace and veth pair, before karmada-apiserver's serving certificate
// is issued for the links' host addresses.
func (e *Env) newPullMembers() error {
	for _, m := range e.opts.PullMembers {
		slot, err := claimNetSlot()
		if err != nil {
			return err
		}
		p := &pullMember{name: m, link: slot, netns: fmt.Sprintf("%s%d-%s", netnsPrefix, slot.index, slot.nonce), proxyScheme: "http"}
		if e.opts.PullProxies[m] == "socks5" {
			p.proxyScheme = "socks5"
		}
		e.pull[m] = p
		if p.proxyPort, err = freePort(); err != nil {
			return err
		}
		host := netip.PrefixFrom(p.hostAddr(), 24).String()
		ns := netip.PrefixFrom(p.nsAddr(), 24).String()
		for _, args := range [][]string{
			{"netns", "add", p.netns},
			{"-n", p.netns, "link", "set", "lo", "up"},
			// The host end is named as a bridge is, so that a later claim of
			// the slot finds and deletes it should this environment die.
			{"link", "add", slot.bridge(), "type", "veth", "peer", "name", "uplink", "netns", p.netns},
			{"addr", "add", host, "dev", slot.bridge()},
			{"link", "set", slot.bridge(), "up"},
			{"-n", p.netns, "addr", "add", ns, "dev", "uplink"},
			{"-n", p.netns, "link", "set", "uplink", "up"},
		} {
			if err := ip(args...); err != nil {
				return fmt.Errorf("network namespace of %s: %w", m, err)
			}
		}
	}
	return nil
}

// pullEtcdURLs are the extra client URLs etcd listens on: the host end of
// every Pull member's link, at etcd's loopback port. etcd serves them
// itself, with no relay in between: its health is the member apiserver's
// readiness, which the agent reports as the Cluster's.
func (e *Env) pullEtcdURLs(port int) []string {
	var out []string
	for _, m := range e.opts.PullMembers {
		out = append(out, "http://"+netip.AddrPortFrom(e.pull[m].hostAddr(), uint16(port)).String())
	}
	return out
}

// etcdURL is etcd's client URL as the member's apiserver dials it: the
// host end of the link, at the port of loopbackURL.
func (p *pullMember) etcdURL(loopbackURL string) string {
	u, err := url.Parse(loopbackURL)
	if err != nil {
		return loopbackURL
	}
	return "http://" + net.JoinHostPort(p.hostAddr().String(), u.Port())
}

// startPullLinks starts, once etcd runs, what a Pull member needs besides
// its apiserver: the forwarder to karmada-apiserver and the proxy into its
// namespace.
func (e *Env) startPullLinks() error {
	for _, m := range e.opts.PullMembers {
		p := e.pull[m]
		var err error
		if p.karmadaForward, err = listenForwarder(netip.AddrPortFrom(p.hostAddr(), 0), hostPort(e.karmada.port)); err != nil {
			return err
		}
		if err := e.startProxy(p); err != nil {
			return err
		}
	}
	return nil
}

// tinyproxyConfig lets the host end of the link CONNECT to any port (no
// ConnectPort line), and never times out an idle tunnel within a test: an
// exec or a watch through it may be silent for minutes.
func tinyproxyConfig(p *pullMember, logFile string) string {
	return fmt.Sprintf(`Port %d
Listen %s
Timeout 3600
MaxClients 1024
Allow %s
DisableViaHeader Yes
LogLevel Info
LogFile %q
`, p.proxyPort, p.nsAddr(), p.hostAddr(), logFile)
}

// dantedConfig lets the host end of the link CONNECT (SOCKS5, no
// authentication: Karmada sends a user only when spec.proxyURL has one) to
// the namespace's loopback, where the member's apiserver listens, and never
// times out an idle tunnel (timeout.io 0), as tinyproxyConfig.
func dantedConfig(p *pullMember, logFile string) string {
	return fmt.Sprintf(`logoutput: %s
internal: %s port = %d
external: 127.0.0.1
clientmethod: none
socksmethod: none
user.privileged: root
user.unprivileged: nobody
timeout.io: 0
client pass {
	from: %s/32 to: 0.0.0.0/0
}
socks pass {
	from: %s/32 to: 127.0.0.1/32
	command: connect
	log: error
}
`, logFile, p.nsAddr(), p.proxyPort, p.hostAddr(), p.hostAddr())
}

func (e *Env) startProxy(p *pullMember) error {
	dir := filepath.Join(e.workDir, "pull", p.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	name, conf, config := "tinyproxy-"+p.name, filepath.Join(dir, "tinyproxy.conf"), ""
	if p.proxyScheme == "socks5" {
		name, conf = "danted-"+p.name, filepath.Join(dir, "danted.conf")
		config = dantedConfig(p, filepath.Join(e.logDir, name+".access.log"))
	} else {
		config = tinyproxyConfig(p, filepath.Join(e.logDir, name+".access.log"))
	}
	if err := os.WriteFile(conf, []byte(config), 0o644); err != nil {
		return err
	}
	if p.proxyScheme == "socks5" {
		// In the foreground (no -D), one process group: KillProxy's SIGKILL
		// takes its children, and every tunnel, down with it.
		p.proxy = e.newProcess(name, dantedBin, "-f", conf, "-N", "1")
	} else {
		p.proxy = e.newProcess(name, tinyproxyBin, "-d", "-c", conf)
	}
	p.proxy.netns = p.netns
	if err := p.proxy.start(); err != nil {
		return err
	}
	return e.waitProxy(context.Background(), p)
}

// waitProxy waits until the proxy accepts connections on its address.
func (e *Env) waitProxy(ctx context.Context, p *pullMember) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		if !p.proxy.running() {
			return false, p.proxy.exitErr()
		}
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", p.proxyURL().Host)
		if err != nil {
			last = err
			return false, nil
		}
		c.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the proxy of %s at %s (%v; log %s): %w", p.name, p.proxyURL().Host, last, p.proxy.logPath, err)
	}
	return nil
}

// memberLocalKubeconfig is the admin kubeconfig the member's own processes
// use inside its namespace: the apiserver's address there, no proxy.
func (e *Env) memberLocalKubeconfig(member string) string {
	if !e.isPull(member) {
		return e.MemberKubeconfig(member)
	}
	return filepath.Join(e.workDir, "kubeconfigs", member+".admin.local.yaml")
}

// registerPullMember does what `karmadactl register` and the agent's
// manifest do: an identity for the agent in karmada-apiserver, then
// karmada-agent in the member's namespace with the register flags. The agent
// creates the Cluster (syncMode Pull, apiEndpoint, proxyURL) and the
// credential Secrets itself.
func (e *Env) registerPullMember(ctx context.Context, member string) error {
	p := e.pull[member]
	kcs, err := kubernetes.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	const role = "system:karmada:agent"
	// karmadactl init's role for agents is not in Karmada's source tree
	// here; the agent's own manifest (artifacts/agent) grants it everything.
	if err := applyRBAC(ctx, kcs, []rbacObject{
		clusterRole(role,
			rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}},
			rbacv1.PolicyRule{NonResourceURLs: []string{"*"}, Verbs: []string{"get"}},
		),
		clusterRoleBindingTo(role, role, groupSubject(agentGroup)),
	}); err != nil {
		return err
	}
	certPEM, keyPEM, err := e.ClientCertificate(agentUserPrefix+member, agentGroup)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["karmada-apiserver"] = &clientcmdapi.Cluster{Server: "https://" + p.karmadaForward.addr().String(), CertificateAuthorityData: e.CAPEM()}
	cfg.AuthInfos["agent"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["karmada-apiserver"] = &clientcmdapi.Context{Cluster: "karmada-apiserver", AuthInfo: "agent"}
	cfg.CurrentContext = "karmada-apiserver"
	karmadaKubeconfig := filepath.Join(e.workDir, "kubeconfigs", "karmada-agent-"+member+".yaml")
	if err := clientcmd.WriteToFile(*cfg, karmadaKubeconfig); err != nil {
		return err
	}
	health, err := freePort()
	if err != nil {
		return err
	}
	p.agent = e.newProcess("karmada-agent-"+member, e.karmadaBinary(karmadaAgent),
		"--karmada-kubeconfig="+karmadaKubeconfig,
		"--kubeconfig="+e.memberLocalKubeconfig(member),
		"--cluster-name="+member,
		"--cluster-api-endpoint="+e.MemberURL(member),
		"--proxy-server-address="+p.proxyURL().String(),
		"--report-secrets=KubeCredentials,KubeImpersonator",
		"--cluster-status-update-frequency="+clusterStatusUpdateFrequency.String(),
		"--cluster-lease-duration="+clusterLeaseDuration.String(),
		"--cluster-failure-threshold=6s",
		"--leader-elect=false",
		"--metrics-bind-address=0",
		"--health-probe-bind-address="+hostPort(health),
		"--v=2",
	)
	p.agent.netns = p.netns
	return p.agent.start()
}

// Lease timing of Pull members: the agent renews its Cluster lease every
// quarter of clusterLeaseDuration, and karmada-controller-manager calls a
// Cluster whose lease is older than clusterMonitorGracePeriod not Ready
// (Karmada's defaults, 40s both, would keep a stopped agent's Cluster Ready
// for close to a minute). The grace period applies to Pull members only:
// karmada-controller-manager probes Push members itself.
const (
	clusterLeaseDuration      = 8 * time.Second
	clusterMonitorGracePeriod = 12 * time.Second
)

// afterPullRegistered reads what the agent reported: the impersonator
// token the cluster proxy forwards with (for Token).
func (e *Env) afterPullRegistered(ctx context.Context, member string) error {
	kcs, err := kubernetes.NewForConfig(e.KarmadaConfig(UserAdmin))
	if err != nil {
		return err
	}
	s, err := kcs.CoreV1().Secrets(KarmadaCluster).Get(ctx, ImpersonatorSecret(member), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the impersonator Secret karmada-agent of %s reports: %w", member, err)
	}
	e.tokens[ImpersonatorUser(member)] = string(s.Data["token"])
	return nil
}

// PullMembers names the members joined in Pull mode.
func (e *Env) PullMembers() []string { return append([]string(nil), e.opts.PullMembers...) }

// ProxyURL is the proxy a Pull member is reached through (its Cluster's
// spec.proxyURL as the agent registers it).
func (e *Env) ProxyURL(member string) *url.URL { return e.pullOf(member).proxyURL() }

// MemberNetns is the network namespace (a name under /run/netns) a Pull
// member's processes run in.
func (e *Env) MemberNetns(member string) string { return e.pullOf(member).netns }

// MemberAPIServerPID is the pid of member's kube-apiserver.
func (e *Env) MemberAPIServerPID(member string) int {
	return e.member(member).proc.pid()
}

// KarmadaAggregatedAPIServerPID is the pid of karmada-aggregated-apiserver,
// whose cluster proxy dials the members.
func (e *Env) KarmadaAggregatedAPIServerPID() int { return e.karmadaProcs.aggregated.pid() }

// StopAgent stops a Pull member's karmada-agent (SIGTERM): the Cluster's
// lease is no longer renewed; the member and its proxy keep running.
func (e *Env) StopAgent(member string) { e.pullOf(member).agent.stop(5 * time.Second) }

// StartAgent starts the agent again and waits until Karmada reports the
// Cluster Ready and proxies to it.
func (e *Env) StartAgent(ctx context.Context, member string) error {
	if err := e.pullOf(member).agent.start(); err != nil {
		return err
	}
	return e.WaitClusterReady(ctx, member)
}

// KillProxy kills a Pull member's proxy with SIGKILL: every tunnel through
// it is cut, and nothing reaches the member's apiserver until StartProxy.
func (e *Env) KillProxy(member string) { e.pullOf(member).proxy.kill() }

// StartProxy starts the proxy again on the same address and waits until it
// accepts connections and Karmada proxies to the member again.
func (e *Env) StartProxy(ctx context.Context, member string) error {
	p := e.pullOf(member)
	if err := p.proxy.start(); err != nil {
		return err
	}
	if err := e.waitProxy(ctx, p); err != nil {
		return err
	}
	return e.WaitClusterReady(ctx, member)
}

func (e *Env) pullOf(member string) *pullMember {
	p, ok := e.pull[member]
	if !ok {
		panic(fmt.Sprintf("env: %q is not a Pull member (Pull members: %v)", member, e.opts.PullMembers))
	}
	return p
}

// proxyFunc is the HTTP proxy function for member: its proxy if it is a
// Pull member, else nil (direct).
func (e *Env) proxyFunc(member string) func(*http.Request) (*url.URL, error) {
	if p := e.pull[member]; p != nil {
		return http.ProxyURL(p.proxyURL())
	}
	return nil
}

// stopPullProcesses stops the agents, before the nodes stop.
func (e *Env) stopPullProcesses() {
	for _, p := range e.pull {
		if p.agent != nil {
			p.agent.stop(5 * time.Second)
		}
	}
}

// stopPullNetworks stops the proxies, closes the forwarders and deletes the
// namespaces, after the nodes and apiservers stopped.
func (e *Env) stopPullNetworks() {
	for _, p := range e.pull {
		if p.proxy != nil {
			p.proxy.stop(5 * time.Second)
		}
		if p.karmadaForward != nil {
			p.karmadaForward.close()
		}
		if err := ip("netns", "del", p.netns); err != nil {
			e.logf("delete network namespace of %s: %v", p.name, err)
		}
		// The host end of the veth goes with its peer's namespace.
		if err := exec.Command("ip", "link", "del", p.link.bridge()).Run(); err == nil {
			e.logf("deleted the link of %s left after its namespace", p.name)
		}
		p.link.release()
	}
}

// pullLeftovers lists what of the Pull members survived Stop.
func (e *Env) pullLeftovers() []string {
	var out []string
	for _, p := range e.pull {
		for _, proc := range []*process{p.agent, p.proxy} {
			if proc != nil && proc.running() {
				out = append(out, fmt.Sprintf("%s: %s still running", p.name, proc.name))
			}
		}
		if fileExists(netnsPath(p.netns)) {
			out = append(out, fmt.Sprintf("%s: network namespace %s", p.name, p.netns))
		}
		if err := exec.Command("ip", "link", "show", p.link.bridge()).Run(); err == nil {
			out = append(out, fmt.Sprintf("%s: link %s", p.name, p.link.bridge()))
		}
		if f := p.karmadaForward; f != nil && !f.isClosed() {
			out = append(out, fmt.Sprintf("%s: forwarder on %s still listening", p.name, f.addr()))
		}
	}
	return out
}
