package env

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// Users known to every environment. Their tokens are in the static token
// files; what they may do is RBAC, created by Start.
const (
	UserAdmin    = "admin"
	UserExecOnly = "exec-only"
	UserNoExec   = "no-exec"
	UserGateway  = "karmada-exec-gateway"
	// UserMemberTrust publishes the members' tokens and CAs for direct
	// member access (the chart's member-trust identity): the only user but
	// admin that may read the Secrets Clusters name.
	UserMemberTrust = "karmada-exec-gateway-member-trust"
	// UserExecKarmadaOnly has exec-only's pod rules and get on
	// services/proxy in karmada-apiserver but neither clusters/proxy nor
	// anything in members: only authorize mode, where the gateway reaches
	// members as itself, lets it exec or GET through services/proxy.
	UserExecKarmadaOnly = "exec-karmada-only"
	// UserExecGroupUnbound has exec-only's rules everywhere and its user is
	// bound to clusters/proxy, but its group is not: Karmada's unified-auth
	// controller then lets the cluster proxy impersonate the user and not
	// the group, so passthrough mode fails for it in the member.
	UserExecGroupUnbound = "exec-group-unbound"

	// GroupExecutors is exec-only's group, bound to clusters/proxy as a
	// passthrough caller's groups must be.
	GroupExecutors = "e2e:executors"
	// GroupUnbound is exec-group-unbound's group, bound to nothing.
	GroupUnbound = "e2e:unbound"

	// Namespace is where the test users' pod permissions apply.
	Namespace = "e2e"
	// KarmadaSystem holds the APIService Service, leases and the like.
	KarmadaSystem = "karmada-system"
	// KarmadaCluster holds the members' impersonator Secrets, as in Karmada.
	KarmadaCluster = "karmada-cluster"

	// KarmadaName names the karmada-apiserver in logs and kubeconfig files.
	KarmadaName = "karmada"
)

// Users lists the users of karmada-apiserver, in the order kubeconfigs are written.
var Users = []string{UserAdmin, UserExecOnly, UserNoExec, UserGateway, UserMemberTrust, UserExecKarmadaOnly, UserExecGroupUnbound}

// ImpersonatorUser names, in Token, the token of member's impersonator
// ServiceAccount (karmada-cluster/karmada-impersonator), which the cluster
// proxy forwards with.
func ImpersonatorUser(member string) string { return member + "-impersonator" }

// Options configures Start. Zero values get defaults from DefaultOptions.
type Options struct {
	// BinDir holds kube-apiserver, kube-controller-manager, kubectl and,
	// in karmada/, Karmada's binaries (make tools builds them all).
	BinDir string
	// KarmadaBinDir holds Karmada's binaries (default BinDir/karmada, the
	// pinned commit; BinDir/karmada-<version> for a release that
	// `make karmada KARMADA_VERSION=<version>` built).
	KarmadaBinDir string
	// KarmadaSrcDir is Karmada's source tree at the commit the binaries
	// were built from; its deploy manifests (APIService, webhook
	// configuration) are applied.
	KarmadaSrcDir string
	// CRDDir holds the Karmada CRDs, in folders below it; every CRD is applied
	// (default: KarmadaSrcDir/charts/karmada/_crds/bases).
	CRDDir string
	// Etcd is the etcd binary (default BinDir/etcd, which make tools builds
	// from the tools module at the version Kubernetes' client requires).
	Etcd string
	// Containerd is the containerd binary (default /usr/bin/containerd,
	// Debian's containerd package, which brings ctr and the runc shim).
	Containerd string
	// ImageCacheDir caches the pods' images, built locally (default
	// _output/images in the repository).
	ImageCacheDir string
	// WorkDir receives certificates, tokens, kubeconfigs, logs and data.
	// Empty means a new temporary directory.
	WorkDir string
	// KeepWorkDir keeps WorkDir after Stop (for looking at logs).
	KeepWorkDir bool
	// Members names the member clusters (default member1, member2).
	Members []string
	// PullMembers names the Members joined in Pull mode by karmada-agent
	// (the others join in Push mode). Each runs in a network namespace of
	// its own, its kube-apiserver reachable from the host only through the
	// HTTP CONNECT proxy of its Cluster's spec.proxyURL (pull.go).
	PullMembers []string
	// PullProxies is the kind of proxy in front of each Pull member, the
	// scheme of its Cluster's spec.proxyURL: "http" (the default for a
	// member not named, Debian's tinyproxy, HTTP CONNECT) or "socks5"
	// (Debian's Dante server).
	PullProxies map[string]string
	Gateway     GatewayOptions
	Host        HostOptions
	// Log receives one line per startup step; nil discards.
	Log io.Writer
	// ComponentLogVerbosity is the klog verbosity of in-process
	// components, whose logs go to WorkDir/logs.
	ComponentLogVerbosity int
	// ComponentsOnEveryCPU runs the Kubernetes and Karmada components
	// (etcd, the apiservers, controllers, schedulers, kubelets,
	// containerd, the agents) with Go's default GOMAXPROCS. Without it
	// each runs with GOMAXPROCS=1 (componentEnv); a measurement of their
	// capacity (make bench) sets it. The gateway always runs with the
	// default.
	ComponentsOnEveryCPU bool
}

// GatewayOptions configures the gateway process.
type GatewayOptions struct {
	// Enabled starts the gateway as part of Start.
	Enabled bool
	// Binary is a prebuilt gateway (E2E_GATEWAY_BINARY sets it in
	// DefaultOptions; hack/e2e.sh builds one for all its test processes).
	// Empty means build ./cmd/gateway from SourceDir into WorkDir, inside
	// the environment's start.
	Binary string
	// SourceDir is the root module (default: the parent of BinDir).
	SourceDir string
	// AuthMode is --auth-mode (default passthrough).
	AuthMode string
	// Args are extra flags, after the ones the environment sets, so they win.
	Args []string
	// Race builds the gateway with the race detector (E2E_GATEWAY_RACE=1
	// sets it in DefaultOptions); GatewayDataRaces then finds its reports
	// in the gateway's log.
	Race bool
	// CPUs, when set, pins the gateway to these CPUs (taskset -c syntax,
	// e.g. "1"), so that a measurement can give it a core of its own.
	CPUs string
}

// Env is a running topology. Methods are safe for concurrent use.
type Env struct {
	opts    Options
	workDir string
	logDir  string
	pkiDir  string
	log     io.Writer

	ctx    context.Context // lives until Stop; in-process components run in it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	ca, frontProxyCA *authority
	kubeletClient    *keyPair
	frontProxyClient *keyPair

	tokens map[string]string // karmada users and member impersonators -> token

	etcd    *process
	etcdURL string
	// etcdTmpfsDir is the data dir outside WorkDir (on tmpfs), removed on Stop.
	etcdTmpfsDir string
	// workDirLock is held until Stop: a work dir whose lock is free was
	// left by a process that died without Stop, and the next Start sweeps it.
	workDirLock  *os.File
	karmada      *apiServer
	members      map[string]*apiServer
	nodes        map[string]*node
	karmadaProcs karmadaProcesses
	// pull holds the Pull members' namespaces, links, proxies and agents.
	pull map[string]*pullMember
	// hostForward carries the host cluster's pods to karmada-apiserver.
	hostForward *forwarder

	hostImagesDone chan struct{} // closed when the host images' build ends
	hostImagesTar  string
	hostImagesErr  error

	gwMu       sync.Mutex
	gateway    *gateway
	gatewayBin string
	// memberTrust publishes the members' tokens and CAs for direct
	// member access (startMemberTrust); nil in a host environment.
	memberTrust *process
	// gatewayWithoutRace is the binary StartExtraGatewayWithoutRace runs.
	gatewayWithoutRace string
	buildDone          chan struct{} // closed when the build started by Start ends
	buildErr           error

	imagesDone chan struct{} // closed when the image build started by Start ends
	imagesTar  string
	imagesErr  error

	compMu     sync.Mutex
	compErrors []error

	stopOnce sync.Once
}

// DefaultOptions fills the paths from the E2E_BIN_DIR, E2E_KARMADA_BIN_DIR,
// E2E_KARMADA_SRC, E2E_CRD_DIR and E2E_ETCD environment variables, else from
// the repository around the working directory (bin/, bin/karmada and
// _output/karmada-src, where `make tools` puts them).
// E2E_KARMADA_VERSION=<version> picks the release `make karmada
// KARMADA_VERSION=<version>` built instead (bin/karmada-<version>,
// _output/karmada-src-<version>). E2E_KEEP=1 keeps the work directory.
func DefaultOptions(opts Options) Options {
	root, _ := FindRepoRoot()
	if opts.BinDir == "" {
		opts.BinDir = os.Getenv("E2E_BIN_DIR")
	}
	if opts.BinDir == "" && root != "" {
		opts.BinDir = filepath.Join(root, "bin")
	}
	suffix := ""
	if v := os.Getenv("E2E_KARMADA_VERSION"); v != "" {
		suffix = "-" + v
	}
	if opts.KarmadaBinDir == "" {
		opts.KarmadaBinDir = os.Getenv("E2E_KARMADA_BIN_DIR")
	}
	if opts.KarmadaBinDir == "" && opts.BinDir != "" {
		opts.KarmadaBinDir = filepath.Join(opts.BinDir, "karmada"+suffix)
	}
	if opts.KarmadaSrcDir == "" {
		opts.KarmadaSrcDir = os.Getenv("E2E_KARMADA_SRC")
	}
	if opts.KarmadaSrcDir == "" && root != "" {
		opts.KarmadaSrcDir = filepath.Join(root, "_output", "karmada-src"+suffix)
	}
	if opts.CRDDir == "" {
		opts.CRDDir = os.Getenv("E2E_CRD_DIR")
	}
	if opts.CRDDir == "" && opts.KarmadaSrcDir != "" {
		opts.CRDDir = filepath.Join(opts.KarmadaSrcDir, "charts", "karmada", "_crds", "bases")
	}
	if opts.Etcd == "" {
		opts.Etcd = os.Getenv("E2E_ETCD")
	}
	if opts.Etcd == "" && opts.BinDir != "" {
		opts.Etcd = filepath.Join(opts.BinDir, "etcd")
	}
	if opts.Containerd == "" {
		opts.Containerd = "/usr/bin/containerd"
	}
	if opts.ImageCacheDir == "" && root != "" {
		opts.ImageCacheDir = filepath.Join(root, "_output", "images")
	}
	if os.Getenv("E2E_GATEWAY_RACE") == "1" {
		opts.Gateway.Race = true
	}
	if opts.Gateway.Binary == "" {
		opts.Gateway.Binary = os.Getenv("E2E_GATEWAY_BINARY")
	}
	if opts.Host.GatewayBinary == "" {
		opts.Host.GatewayBinary = os.Getenv("E2E_HOST_GATEWAY_BINARY")
	}
	if os.Getenv("E2E_KEEP") != "" {
		opts.KeepWorkDir = true
	}
	if len(opts.Members) == 0 {
		opts.Members = []string{"member1", "member2"}
	}
	if opts.Gateway.SourceDir == "" {
		if root != "" {
			opts.Gateway.SourceDir = root
		} else if opts.BinDir != "" {
			opts.Gateway.SourceDir = filepath.Dir(opts.BinDir)
		}
	}
	if opts.Gateway.AuthMode == "" {
		opts.Gateway.AuthMode = "passthrough"
	}
	return opts
}

// FindRepoRoot walks up from the working directory to the directory holding
// cmd/gateway and go.mod: the root module, whether run from it or from e2e/.
func FindRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) && fileExists(filepath.Join(dir, "cmd", "gateway")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no directory with go.mod and cmd/gateway above the working directory")
		}
		dir = parent
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Start brings the whole topology up and returns once every part is ready:
// apiservers answer /readyz, CRDs are established, nodes are Ready, the
// cluster proxy reaches every member and, if enabled, the gateway is ready.
// On error everything already started is stopped again.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	opts = DefaultOptions(opts)
	bins := []string{opts.Etcd, opts.Containerd}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"} {
		bins = append(bins, filepath.Join(opts.BinDir, b))
	}
	for _, b := range []string{karmadaAggregatedAPIServer, karmadaControllerManager, karmadaScheduler, karmadaWebhook} {
		bins = append(bins, filepath.Join(opts.KarmadaBinDir, b))
	}
	for _, m := range opts.PullMembers {
		if !slices.Contains(opts.Members, m) {
			return nil, fmt.Errorf("Pull member %q is not one of Members %v", m, opts.Members)
		}
	}
	for m, kind := range opts.PullProxies {
		if !slices.Contains(opts.PullMembers, m) {
			return nil, fmt.Errorf("PullProxies names %q, which is not one of PullMembers %v", m, opts.PullMembers)
		}
		if _, err := pullProxyBinary(kind); err != nil {
			return nil, err
		}
	}
	for _, m := range opts.PullMembers {
		proxyBin, _ := pullProxyBinary(opts.PullProxies[m])
		if !slices.Contains(bins, proxyBin) {
			bins = append(bins, proxyBin)
		}
	}
	if len(opts.PullMembers) > 0 {
		bins = append(bins, filepath.Join(opts.KarmadaBinDir, karmadaAgent), "/usr/bin/nsenter")
	}
	for _, bin := range bins {
		if !fileExists(bin) {
			return nil, fmt.Errorf("%s is missing (make tools builds Kubernetes' and Karmada's binaries and installs etcd and containerd from Debian)", bin)
		}
	}
	for _, dir := range []string{opts.KarmadaSrcDir, opts.CRDDir} {
		if !fileExists(dir) {
			return nil, fmt.Errorf("Karmada source %s is missing (make tools fetches it)", dir)
		}
	}
	if err := checkKarmadaStamps(opts.KarmadaBinDir, opts.KarmadaSrcDir); err != nil {
		return nil, err
	}
	if opts.Host.Enabled {
		if err := checkVersioned(ctx, filepath.Join(opts.BinDir, "kube-apiserver")); err != nil {
			return nil, err
		}
	}
	e := &Env{opts: opts, log: opts.Log, tokens: map[string]string{}, members: map[string]*apiServer{}, nodes: map[string]*node{}, pull: map[string]*pullMember{}}
	if e.log == nil {
		e.log = io.Discard
	}
	if e.workDir = opts.WorkDir; e.workDir == "" {
		if e.workDir, err = os.MkdirTemp("", workDirPattern); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(e.workDir, 0o755); err != nil {
		return nil, err
	}
	if e.workDirLock, err = lockWorkDir(e.workDir); err != nil {
		return nil, err
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			// The work dir (and the logs) may be removed next: show why first.
			e.WriteLogTails(e.log, 40)
			e.stop(opts.KeepWorkDir)
		}
	}()
	e.logDir = filepath.Join(e.workDir, "logs")
	e.pkiDir = filepath.Join(e.workDir, "pki")
	for _, d := range []string{e.logDir, e.pkiDir, filepath.Join(e.workDir, "kubeconfigs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	e.logf("work dir %s", e.workDir)
	for _, swept := range sweepDeadWorkDirs(os.TempDir()) {
		e.logf("%s", swept)
	}
	e.logf("Karmada %s from %s", e.KarmadaCommit(), opts.KarmadaBinDir)

	// The gateway builds while the apiservers start: both take seconds.
	if opts.Gateway.Enabled {
		e.buildDone = make(chan struct{})
		go func() {
			defer close(e.buildDone)
			e.buildErr = e.buildGateway(ctx)
		}()
	}

	// The pods' images build (or come from the cache) meanwhile too.
	e.imagesDone = make(chan struct{})
	go func() {
		defer close(e.imagesDone)
		e.imagesTar, e.imagesErr = e.buildImages(ctx)
	}()

	if opts.Host.Enabled {
		e.hostImagesDone = make(chan struct{})
		go func() {
			defer close(e.hostImagesDone)
			e.hostImagesTar, e.hostImagesErr = e.buildHostImages(ctx)
		}()
	}

	if err := e.writeCredentials(); err != nil {
		return nil, err
	}
	if err := e.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := e.gatewayBuildFailed(); err != nil {
		return nil, err
	}
	e.logf("etcd ready (%s)", time.Since(start).Round(time.Millisecond))

	if err := e.startAPIServers(ctx); err != nil {
		return nil, err
	}
	if err := e.gatewayBuildFailed(); err != nil {
		return nil, err
	}
	e.logf("apiservers ready (%s)", time.Since(start).Round(time.Millisecond))

	if err := e.bootstrap(ctx); err != nil {
		return nil, err
	}
	e.logf("CRDs, namespaces, RBAC and secrets created (%s)", time.Since(start).Round(time.Millisecond))

	if err := e.writeKubeconfigs(); err != nil {
		return nil, err
	}
	if err := e.startNodes(ctx); err != nil {
		return nil, err
	}
	e.logf("nodes ready: kubelets on containerd (%s)", time.Since(start).Round(time.Millisecond))
	if err := e.startKarmada(ctx); err != nil {
		return nil, err
	}
	e.logf("Karmada ready, members joined (%s)", time.Since(start).Round(time.Millisecond))
	if opts.Host.Enabled {
		// The host release's hook Job applies the chart's karmada-apiserver
		// objects itself: that is what a test of it checks.
		if err := e.prepareHost(ctx); err != nil {
			return nil, err
		}
		e.logf("host cluster ready: karmada-apiserver reachable from its pods at %s (%s)", e.HostKarmadaURL(), time.Since(start).Round(time.Millisecond))
	} else {
		if err := e.applyGatewayRBAC(ctx); err != nil {
			return nil, err
		}
		e.logf("the chart's gateway RBAC applied and propagated (%s)", time.Since(start).Round(time.Millisecond))
	}

	if opts.Gateway.Enabled {
		<-e.buildDone
		if e.buildErr != nil {
			return nil, e.buildErr
		}
		// A host environment's member-trust, if any, is the release's.
		if !opts.Host.Enabled {
			if err := e.startMemberTrust(ctx); err != nil {
				return nil, err
			}
			e.logf("member-trust published the members' tokens and CAs (%s)", time.Since(start).Round(time.Millisecond))
		}
		if err := e.StartGateway(ctx); err != nil {
			return nil, err
		}
		e.logf("gateway ready at %s (%s)", e.GatewayURL(), time.Since(start).Round(time.Millisecond))
	}
	return e, nil
}

// gatewayBuildFailed returns the build error if the build already failed,
// so a gateway that does not compile fails Start early instead of after
// every apiserver came up.
func (e *Env) gatewayBuildFailed() error {
	if e.buildDone == nil {
		return nil
	}
	select {
	case <-e.buildDone:
		return e.buildErr
	default:
		return nil
	}
}

func (e *Env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "e2e-env: "+format+"\n", args...)
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Stop tears everything down: in-process components, the gateway, the
// nodes (kubelets, every pod sandbox, containerd, bridges, mounts and
// cgroups), Karmada, the apiservers and etcd (SIGTERM, then SIGKILL), and
// removes WorkDir unless Options.KeepWorkDir. It is safe to call more than
// once.
func (e *Env) Stop() { e.stop(e.opts.KeepWorkDir) }

// KeepsWorkDir reports whether Stop leaves WorkDir in place
// (Options.KeepWorkDir, which E2E_KEEP sets).
func (e *Env) KeepsWorkDir() bool { return e.opts.KeepWorkDir }

func (e *Env) stop(keep bool) {
	e.stopOnce.Do(func() {
		e.cancel()
		e.wg.Wait()
		e.gwMu.Lock()
		if e.gateway != nil {
			e.gateway.proc.stop(5 * time.Second)
		}
		if e.memberTrust != nil {
			e.memberTrust.stop(5 * time.Second)
		}
		e.gwMu.Unlock()
		if e.imagesDone != nil {
			<-e.imagesDone
		}
		if e.hostImagesDone != nil {
			<-e.hostImagesDone
		}
		if e.hostForward != nil {
			e.hostForward.close()
		}
		e.stopPullProcesses()
		var nodes sync.WaitGroup
		for _, n := range e.nodes {
			nodes.Go(func() { e.stopNode(n) })
		}
		nodes.Wait()
		for _, p := range e.karmadaProcs.all() {
			p.stop(5 * time.Second)
		}
		var wg sync.WaitGroup
		for _, s := range e.apiServers() {
			if s.proc == nil {
				continue // Start failed before the apiservers were started
			}
			wg.Go(func() { s.proc.stop(5 * time.Second) })
		}
		wg.Wait()
		e.stopPullNetworks()
		if e.etcd != nil {
			e.etcd.stop(5 * time.Second)
		}
		if e.etcdTmpfsDir != "" {
			_ = os.RemoveAll(e.etcdTmpfsDir)
		}
		defer unlockWorkDir(e.workDir, e.workDirLock)
		if keep {
			e.logf("kept work dir %s", e.workDir)
			return
		}
		if err := os.RemoveAll(e.workDir); err != nil {
			e.logf("remove work dir: %v", err)
		}
	})
}

func (e *Env) apiServers() []*apiServer {
	var out []*apiServer
	if e.karmada != nil {
		out = append(out, e.karmada)
	}
	for _, name := range e.clusters() {
		if m := e.members[name]; m != nil {
			out = append(out, m)
		}
	}
	return out
}

// WorkDir is where certificates, kubeconfigs and logs are.
func (e *Env) WorkDir() string { return e.workDir }

// LogDir holds one log file per process and in-process component.
func (e *Env) LogDir() string { return e.logDir }

// Members names the member clusters.
func (e *Env) Members() []string { return slices.Clone(e.opts.Members) }

// clusters names every Kubernetes cluster of the environment besides
// karmada-apiserver: the members, then the host cluster if enabled.
func (e *Env) clusters() []string {
	out := slices.Clone(e.opts.Members)
	if e.opts.Host.Enabled {
		out = append(out, HostCluster)
	}
	return out
}

// BinDir holds kube-apiserver and kubectl.
func (e *Env) BinDir() string { return e.opts.BinDir }

// Kubectl is the path of the kubectl binary.
func (e *Env) Kubectl() string { return filepath.Join(e.opts.BinDir, "kubectl") }

// CAFile is the CA every serving certificate chains to (and the client CA).
func (e *Env) CAFile() string { return filepath.Join(e.pkiDir, "ca.crt") }

// CAPEM is the content of CAFile.
func (e *Env) CAPEM() []byte { return slices.Clone(e.ca.certPEM) }

// Token returns user's static token (a karmada user or a member impersonator).
func (e *Env) Token(user string) string { return e.tokens[user] }

// EtcdURL is the client URL of the etcd every apiserver stores in, each
// under the prefix "/" + its name (KarmadaName or the member's).
// It is for tests that must write what an apiserver would refuse.
func (e *Env) EtcdURL() string { return e.etcdURL }

// KarmadaURL is karmada-apiserver's base URL.
func (e *Env) KarmadaURL() string { return e.karmada.url() }

// MemberURL is the base URL of member's apiserver.
func (e *Env) MemberURL(member string) string { return e.member(member).url() }

// KarmadaConfig is a rest.Config for user against karmada-apiserver.
func (e *Env) KarmadaConfig(user string) *rest.Config {
	return e.restConfig(e.karmada.url(), user)
}

// MemberConfig is a rest.Config for the member's admin; a Pull member's
// goes through its proxy, the only way to it from the host.
func (e *Env) MemberConfig(member string) *rest.Config {
	cfg := e.restConfig(e.member(member).url(), UserAdmin)
	cfg.Proxy = e.proxyFunc(member)
	return cfg
}

// ClusterProxyConfig is a rest.Config for user whose host is the cluster
// proxy of member: requests made with it take the path a gateway rewrite takes.
func (e *Env) ClusterProxyConfig(member, user string) *rest.Config {
	return e.restConfig(e.karmada.url()+"/apis/cluster.karmada.io/v1alpha1/clusters/"+member+"/proxy", user)
}

// KarmadaClient is a clientset for user against karmada-apiserver.
func (e *Env) KarmadaClient(user string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(e.KarmadaConfig(user))
}

// MemberClient is an admin clientset for member.
func (e *Env) MemberClient(member string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(e.MemberConfig(member))
}

func (e *Env) restConfig(host, user string) *rest.Config {
	return &rest.Config{
		Host:            host,
		BearerToken:     e.tokens[user],
		TLSClientConfig: rest.TLSClientConfig{CAData: e.CAPEM()},
		QPS:             100,
		Burst:           200,
		UserAgent:       "e2e-env/" + user,
	}
}

func (e *Env) member(name string) *apiServer {
	m, ok := e.members[name]
	if !ok {
		panic(fmt.Sprintf("env: no member %q (members: %v)", name, e.opts.Members))
	}
	return m
}

// componentContext is the long-lived context for an in-process component,
// with a klog logger writing to WorkDir/logs/<name>.log.
func (e *Env) componentContext(name string) (context.Context, io.Closer, error) {
	f, err := os.OpenFile(filepath.Join(e.logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(f), textlogger.Verbosity(e.opts.ComponentLogVerbosity)))
	return klog.NewContext(e.ctx, logger.WithName(name)), f, nil
}

// runComponent runs fn until Stop. An early return is recorded and shown by
// ComponentErrors, and written to the component's log.
func (e *Env) runComponent(name string, fn func(ctx context.Context) error) error {
	ctx, closer, err := e.componentContext(name)
	if err != nil {
		return err
	}
	e.wg.Go(func() {
		defer closer.Close()
		err := fn(ctx)
		if e.ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("returned before the environment stopped")
		}
		klog.FromContext(ctx).Error(err, "component stopped")
		e.compMu.Lock()
		e.compErrors = append(e.compErrors, fmt.Errorf("%s: %w", name, err))
		e.compMu.Unlock()
	})
	return nil
}

// ComponentErrors reports in-process components that stopped on their own
// and node processes (containerd, kubelet, the member's scheduler and
// controllers) that exited without a stop or kill.
func (e *Env) ComponentErrors() error {
	e.compMu.Lock()
	defer e.compMu.Unlock()
	return errors.Join(append(slices.Clone(e.compErrors), e.nodeErrors()...)...)
}
