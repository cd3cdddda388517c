package env

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
)

var loopbackHosts = []string{"127.0.0.1", "::1", "localhost"}

// apiServer is one kube-apiserver process.
type apiServer struct {
	name    string
	port    int
	proc    *process
	serving *keyPair
	tokens  string // token file
}

func (s *apiServer) url() string { return "https://" + hostPort(s.port) }

// writeCredentials creates the CAs, every certificate, the service-account
// key and one static token file per apiserver.
func (e *Env) writeCredentials() error {
	var err error
	if e.ca, err = newAuthority(e.pkiDir, "ca", "e2e-ca"); err != nil {
		return err
	}
	if e.frontProxyCA, err = newAuthority(e.pkiDir, "front-proxy-ca", "e2e-front-proxy-ca"); err != nil {
		return err
	}
	if e.frontProxyClient, err = e.frontProxyCA.issue(e.pkiDir, "front-proxy-client", "front-proxy-client", nil, nil); err != nil {
		return err
	}
	// The member apiservers present this to their kubelets.
	if e.kubeletClient, err = e.ca.issue(e.pkiDir, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil); err != nil {
		return err
	}
	if err := writeServiceAccountKey(filepath.Join(e.pkiDir, "sa.key")); err != nil {
		return err
	}
	for _, u := range Users {
		e.tokens[u] = randomToken()
	}

	newServer := func(name string, users map[string]string, hosts []string) (*apiServer, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		serving, err := e.ca.issue(e.pkiDir, name+"-apiserver", name+"-apiserver", nil, hosts)
		if err != nil {
			return nil, err
		}
		s := &apiServer{name: name, port: port, serving: serving, tokens: filepath.Join(e.pkiDir, name+"-tokens.csv")}
		if err := writeTokenFile(s.tokens, e.tokens, users); err != nil {
			return nil, err
		}
		return s, nil
	}
	// user -> groups (comma separated). The cluster proxy impersonates each
	// group in the member, so a passthrough caller's groups matter.
	karmadaUsers := map[string]string{
		UserAdmin: "system:masters", UserExecOnly: GroupExecutors, UserNoExec: "", UserGateway: "", UserMemberTrust: "",
		UserExecKarmadaOnly: "e2e:karmada-only", UserExecGroupUnbound: GroupUnbound,
	}
	karmadaHosts := loopbackHosts
	if err := e.newPullMembers(); err != nil {
		return err
	}
	for _, m := range e.opts.PullMembers {
		// The agents reach karmada-apiserver through the forwarder on the
		// host end of their link.
		karmadaHosts = append(slices.Clone(karmadaHosts), e.pull[m].hostAddr().String())
	}
	if e.opts.Host.Enabled {
		// The host cluster's pods reach karmada-apiserver at the host's
		// address on their bridge (the forwarder there), so the serving
		// certificate names that address: the slot is claimed now.
		n, err := e.newHostNode()
		if err != nil {
			return err
		}
		karmadaHosts = append(slices.Clone(karmadaHosts), n.slot.gateway().String())
	}
	if e.karmada, err = newServer(KarmadaName, karmadaUsers, karmadaHosts); err != nil {
		return err
	}
	for _, m := range e.clusters() {
		users := map[string]string{UserAdmin: "system:masters"}
		if e.members[m], err = newServer(m, users, loopbackHosts); err != nil {
			return err
		}
	}
	return nil
}

// writeTokenFile writes kube-apiserver's token,user,uid,"groups" format.
func writeTokenFile(path string, tokens, users map[string]string) error {
	var b strings.Builder
	for user, groups := range users {
		fmt.Fprintf(&b, "%s,%s,%s", tokens[user], user, "uid-"+user)
		if groups != "" {
			fmt.Fprintf(&b, ",%q", groups)
		}
		b.WriteString("\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// checkEtcd refuses an etcd whose watch-progress requests kube-apiserver
// does not use (k8s.io/apiserver's feature support checker: fixed in 3.4.31
// and 3.5.13). Without them a watch cache falls behind the revision that the
// other prefixes move on, and a watch without a resourceVersion (GitLab
// Runner's) fails with "Too large resource version"; only periodic
// progress notifications to every watch would hide it, at most of an idle
// environment's CPU. Debian bookworm's etcd-server is 3.4.23.
func checkEtcd(ctx context.Context, path string) error {
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w (make tools builds etcd into bin/)", path, err)
	}
	v, err := etcdVersion(string(out))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !etcdAnswersProgressRequests(v) {
		return fmt.Errorf("%s is etcd %s: the apiservers' watch caches need 3.4.31+ or 3.5.13+ (make tools builds etcd 3.7 into bin/)", path, v)
	}
	return nil
}

// etcdVersion reads "etcd Version: X.Y.Z" from etcd --version.
func etcdVersion(out string) (*version.Version, error) {
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "etcd Version:"); ok {
			return version.ParseSemantic(strings.TrimSpace(v))
		}
	}
	return nil, fmt.Errorf("no version in etcd --version's output %q", out)
}

func etcdAnswersProgressRequests(v *version.Version) bool {
	if v.Major() == 3 && v.Minor() == 4 {
		return v.AtLeast(version.MustParseSemantic("3.4.31"))
	}
	return v.AtLeast(version.MustParseSemantic("3.5.13"))
}

func (e *Env) startEtcd(ctx context.Context) error {
	if err := checkEtcd(ctx, e.opts.Etcd); err != nil {
		return err
	}
	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	// A tmpfs data dir: fsync costs nothing, and nothing is left on disk.
	dataDir := filepath.Join(e.workDir, "etcd")
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "e2e-etcd-"); err == nil {
			dataDir, e.etcdTmpfsDir = d, d
			if err := os.Symlink(d, filepath.Join(e.workDir, "etcd")); err != nil {
				return err
			}
		}
	}
	clientURL := "http://" + hostPort(clientPort)
	peerURL := "http://" + hostPort(peerPort)
	e.etcd = e.newProcess("etcd", e.opts.Etcd,
		"--name=e2e",
		"--data-dir="+dataDir,
		"--listen-client-urls="+strings.Join(append([]string{clientURL}, e.pullEtcdURLs(clientPort)...), ","),
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL,
		"--listen-metrics-urls=",
		"--log-level=warn",
		"--logger=zap",
	)
	e.etcdURL = clientURL
	if err := e.etcd.start(); err != nil {
		return err
	}
	return e.waitHTTP(ctx, e.etcd, clientURL+"/health", "", 30*time.Second)
}

// apiServerArgs are the flags shared by every apiserver, then the
// karmada-apiserver's aggregator flags or the members' kubelet flags.
func (e *Env) apiServerArgs(s *apiServer) []string {
	etcdURL := e.etcdURL
	if p := e.pull[s.name]; p != nil {
		// Inside the member's namespace the host's loopback is out of reach.
		etcdURL = p.etcdURL(e.etcdURL)
	}
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--etcd-prefix=/" + s.name,
		"--secure-port=" + strconv.Itoa(s.port),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--tls-cert-file=" + s.serving.CertFile,
		"--tls-private-key-file=" + s.serving.KeyFile,
		"--client-ca-file=" + filepath.Join(e.pkiDir, "ca.crt"),
		"--token-auth-file=" + s.tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://" + s.name + ".e2e.invalid",
		"--service-account-key-file=" + filepath.Join(e.pkiDir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(e.pkiDir, "sa.key"),
		"--service-cluster-ip-range=" + serviceNetwork,
		// A loopback advertise address is not a valid Endpoints address.
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		// Key-count stats feed only APF's list costs, which are off: no
		// periodic reads of every resource's count.
		"--feature-gates=SizeBasedListCostEstimate=false",
		"--profiling=false",
		"--v=1",
	}
	if s.name != HostCluster {
		// No controller-manager creates default ServiceAccounts; Karmada
		// disables it too. The host cluster is a whole cluster: its
		// controller-manager does.
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	if s == e.karmada {
		args = append(args,
			// karmada-apiserver's own record of who read which pod, which
			// the gateway's audit events are compared with (KarmadaAuditLog).
			"--audit-policy-file="+e.karmadaAuditPolicy(),
			"--audit-log-path="+e.KarmadaAuditLog(),
			"--audit-log-format=json",
			"--audit-log-maxsize=100",
			"--audit-log-maxbackup=1",
			"--requestheader-client-ca-file="+filepath.Join(e.pkiDir, "front-proxy-ca.crt"),
			"--requestheader-allowed-names=front-proxy-client",
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file="+e.frontProxyClient.CertFile,
			"--proxy-client-key-file="+e.frontProxyClient.KeyFile,
			// Route to the APIService's ExternalName Service, as Karmada runs it.
			"--enable-aggregator-routing=false",
		)
	} else {
		args = append(args,
			"--kubelet-client-certificate="+e.kubeletClient.CertFile,
			"--kubelet-client-key="+e.kubeletClient.KeyFile,
			"--kubelet-certificate-authority="+filepath.Join(e.pkiDir, "ca.crt"),
			// The kubelet's Node is "localhost": dialing it by hostname keeps
			// exec, attach, logs and port-forward on loopback.
			"--kubelet-preferred-address-types=Hostname",
		)
	}
	return args
}

func (e *Env) startAPIServers(ctx context.Context) error {
	if err := e.startPullLinks(); err != nil {
		return err
	}
	servers := e.apiServers()
	for _, s := range servers {
		s.proc = e.newProcess(s.name+"-apiserver", filepath.Join(e.opts.BinDir, "kube-apiserver"), e.apiServerArgs(s)...)
		if p := e.pull[s.name]; p != nil {
			s.proc.netns = p.netns
		}
		if err := s.proc.start(); err != nil {
			return err
		}
	}
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { errs[i] = e.waitReady(ctx, s) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// apiServerStartTimeout bounds an apiserver's start. Idle, three start in
// about 10 s; with a few other environments starting on the same two cores
// (CPU pressure near 100%), their storage caches alone took over 80 s.
const apiServerStartTimeout = 3 * time.Minute

func (e *Env) waitReady(ctx context.Context, s *apiServer) error {
	return e.waitHTTPVia(ctx, s.proc, s.url()+"/readyz", e.tokens[UserAdmin], apiServerStartTimeout, e.proxyFunc(s.name))
}

// StopMember stops member's apiserver, an outage as the rest of the
// topology sees it: SIGTERM, then SIGKILL after 3s (kube-apiserver can take
// longer than that to exit while clients hold streams). The kubelet and
// Karmada keep running and see it go.
func (e *Env) StopMember(name string) {
	e.member(name).proc.stop(3 * time.Second)
}

// StartMember starts member's apiserver again, on the same port with the
// same data, and waits for /readyz and for Karmada to report the Cluster
// Ready and proxy to it again.
func (e *Env) StartMember(ctx context.Context, name string) error {
	s := e.member(name)
	if err := s.proc.start(); err != nil {
		return err
	}
	if err := e.waitReady(ctx, s); err != nil {
		return err
	}
	return e.WaitClusterReady(ctx, name)
}

// waitHTTP polls url until it answers 200, the process exits, or timeout.
// token may be "" (no Authorization) and the server is verified against the CA.
func (e *Env) waitHTTP(ctx context.Context, p *process, url string, token string, timeout time.Duration) error {
	return e.waitHTTPVia(ctx, p, url, token, timeout, nil)
}

// waitHTTPVia is waitHTTP through proxy (nil: direct).
func (e *Env) waitHTTPVia(ctx context.Context, p *process, url string, token string, timeout time.Duration, proxy func(*http.Request) (*neturl.URL, error)) error {
	client := e.httpClient()
	client.Transport.(*http.Transport).Proxy = proxy
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if p != nil && !p.running() {
			return false, p.exitErr()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return true, nil
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		return false, nil
	})
	if err != nil {
		name := "endpoint"
		if p != nil {
			name = p.name
		}
		return fmt.Errorf("wait for %s %s (last answer: %s; log %s): %w", name, url, last, p.logPathOrEmpty(), err)
	}
	return nil
}

func (p *process) logPathOrEmpty() string {
	if p == nil {
		return "-"
	}
	return p.logPath
}

func (e *Env) httpClient() *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: e.ca.pool},
		},
	}
}

// karmadaAuditPolicy records, at Metadata level, the reads of pods in
// Namespace: the requests whose caller the gateway's own audit events name
// too (the admission check in passthrough, a caller's own GET), and few
// enough to cost nothing.
const karmadaAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [get]
  resources: [{group: "", resources: [pods]}]
  namespaces: [` + Namespace + `]
- level: None
`

// karmadaAuditPolicy writes the policy karmada-apiserver audits with and
// returns its path.
func (e *Env) karmadaAuditPolicy() string {
	path := filepath.Join(e.pkiDir, "karmada-audit-policy.yaml")
	if err := os.WriteFile(path, []byte(karmadaAuditPolicy), 0o600); err != nil {
		panic(err) // the work dir was just made writable
	}
	return path
}

// KarmadaAuditLog is karmada-apiserver's audit log (JSON lines of
// audit.k8s.io/v1 Events): every get of a pod in Namespace, whoever asked.
func (e *Env) KarmadaAuditLog() string { return filepath.Join(e.logDir, "karmada-apiserver-audit.log") }
