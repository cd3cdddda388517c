package env

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
)

// The Karmada host cluster: the Kubernetes cluster a Karmada installation
// runs in (karmada-system there holds Karmada's components and their
// kubeconfig Secret), where the gateway's chart is installed. It is built
// as a member is (kube-apiserver, kube-controller-manager, kube-scheduler,
// a real kubelet on its own containerd and bridge) but it is not joined to
// Karmada. Its containerd holds, besides the pods' images, the images the
// chart's default values name: the gateway image (package images' builder,
// as `make image`) and a kubectl image for the hook Job, both built here.
// Its pods reach karmada-apiserver through a forwarder on the host's address
// on their bridge, the address karmada-apiserver's serving certificate
// names, with the kubeconfig of the Secret karmada-system/karmada-kubeconfig
// (key kubeconfig), as Karmada's installers create it.

// HostCluster names the Karmada host cluster (its kubeconfig is
// MemberKubeconfig(HostCluster)).
const HostCluster = "karmada-host"

// KarmadaKubeconfigSecret is the Secret in the host's karmada-system with
// karmada-apiserver's kubeconfig (key KarmadaKubeconfigKey), as Karmada's
// installers name it and the chart reads it by default.
const (
	KarmadaKubeconfigSecret = "karmada-kubeconfig"
	KarmadaKubeconfigKey    = "kubeconfig"
	// KarmadaAdminUser is the identity of that kubeconfig, as in Karmada:
	// a client certificate for system:admin in the group system:masters.
	KarmadaAdminUser = "system:admin"
)

// HostOptions configures the host cluster.
type HostOptions struct {
	// Enabled starts the host cluster. The environment then applies none
	// of the chart's RBAC to karmada-apiserver itself: a release installed
	// on the host applies it with its hook Job.
	Enabled bool
	// GatewayBinary is a prebuilt static gateway for the host's image, as
	// images.BuildGatewayBinary builds it (E2E_HOST_GATEWAY_BINARY sets it
	// in DefaultOptions; hack/e2e.sh builds one). Empty means build it
	// inside the environment's start.
	GatewayBinary string
}

// checkVersioned refuses a kube-apiserver that reports no release version:
// helm install checks the chart's kubeVersion against it, and a build
// without the version link flags reports v0.0.0-master, which no chart
// accepts.
func checkVersioned(ctx context.Context, kubeAPIServer string) error {
	out, err := exec.CommandContext(ctx, kubeAPIServer, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", kubeAPIServer, err)
	}
	if v := strings.TrimSpace(string(out)); strings.Contains(v, "v0.0.0") {
		return fmt.Errorf("%s reports %q: helm cannot install the chart on it (make tools builds it with the release version, hack/tools/version.mk)", kubeAPIServer, v)
	}
	return nil
}

// newHostNode claims the host's pod network slot, before karmada-apiserver's
// serving certificate is issued for the slot's address.
func (e *Env) newHostNode() (*node, error) {
	slot, err := claimNetSlot()
	if err != nil {
		return nil, err
	}
	n := &node{member: HostCluster, dir: filepath.Join(e.workDir, "nodes", HostCluster), slot: slot}
	e.nodes[HostCluster] = n
	return n, nil
}

// hostControllerArgs are the host's kube-controller-manager controllers: what
// a chart's Deployment, hook Jobs, PodDisruptionBudget and Services need in
// a whole cluster, including the ServiceAccounts its admission requires.
func (e *Env) hostControllerArgs() []string {
	return []string{
		"--controllers=deployment-controller,replicaset-controller,job-controller,garbage-collector-controller," +
			"disruption-controller,endpointslice-controller,node-lifecycle-controller,namespace-controller," +
			"serviceaccount-controller,root-ca-certificate-publisher-controller,pod-garbage-collector-controller",
		"--root-ca-file=" + e.CAFile(),
		"--service-account-private-key-file=" + filepath.Join(e.pkiDir, "sa.key"),
		"--use-service-account-credentials=false",
	}
}

// chartImages are the images the chart's default values name.
type chartImages struct {
	Gateway, Kubectl string
}

// readChartImages reads the default image references from the chart:
// image.repository with the appVersion tag, and the hook Job's
// karmadaResources.job.image.
func readChartImages(chartDir string) (chartImages, error) {
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct {
			Repository, Tag string
		}
		KarmadaResources struct {
			Job struct {
				Image struct {
					Repository, Tag string
				}
			}
		} `json:"karmadaResources"`
	}
	for file, into := range map[string]any{"Chart.yaml": &chart, "values.yaml": &values} {
		b, err := os.ReadFile(filepath.Join(chartDir, file))
		if err != nil {
			return chartImages{}, err
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			return chartImages{}, fmt.Errorf("%s: %w", file, err)
		}
	}
	tag := values.Image.Tag
	if tag == "" {
		tag = chart.AppVersion
	}
	job := values.KarmadaResources.Job.Image
	if values.Image.Repository == "" || tag == "" || job.Repository == "" || job.Tag == "" {
		return chartImages{}, fmt.Errorf("chart %s names no default gateway or kubectl image", chartDir)
	}
	return chartImages{Gateway: values.Image.Repository + ":" + tag, Kubectl: job.Repository + ":" + job.Tag}, nil
}

// buildHostImages builds the gateway image from the checkout and a kubectl
// image from bin/kubectl, tagged as the chart's defaults name them, so
// a release installed with default values runs them without a pull
// (imagePullPolicy IfNotPresent finds them in the host's containerd).
func (e *Env) buildHostImages(ctx context.Context) (string, error) {
	root := e.opts.Gateway.SourceDir
	refs, err := readChartImages(e.ChartDir())
	if err != nil {
		return "", err
	}
	dir := filepath.Join(e.workDir, "host-images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// make tools builds bin/kubectl static (the Makefile), as the
	// image needs: it has no dynamic loader.
	kubectl := filepath.Join(e.opts.BinDir, "kubectl")
	kctlImg, err := images.Kubectl(kubectl)
	if err != nil {
		return "", fmt.Errorf("kubectl image from %s (make tools builds it static): %w", kubectl, err)
	}
	gatewayBin := e.opts.Host.GatewayBinary
	if gatewayBin == "" {
		gatewayBin = filepath.Join(dir, "gateway")
		if err := images.BuildGatewayBinary(ctx, root, "", gatewayBin); err != nil {
			return "", err
		}
	}
	opts := images.GatewayOptions{Binary: gatewayBin, Version: "e2e"}
	if rev, created, err := images.Commit(ctx, root); err == nil {
		opts.Revision, opts.Created = rev, created
	}
	gatewayImg, err := images.Gateway(opts)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "images.tar")
	if err := images.WriteTarball(out, map[string]v1.Image{refs.Gateway: gatewayImg, refs.Kubectl: kctlImg}); err != nil {
		return "", err
	}
	return out, nil
}

// HostConfig is a rest.Config for the host cluster's admin.
func (e *Env) HostConfig() *rest.Config { return e.MemberConfig(HostCluster) }

// HostClient is an admin clientset for the host cluster.
func (e *Env) HostClient() (kubernetes.Interface, error) { return e.MemberClient(HostCluster) }

// HostKubeconfig is the path of the host cluster's admin kubeconfig.
func (e *Env) HostKubeconfig() string { return e.MemberKubeconfig(HostCluster) }

// HostBridgeAddress is the host machine's address on the host cluster's pod
// bridge: its pods reach it, and it reaches their IPs (a scrape of a pod's
// metrics port, for instance).
func (e *Env) HostBridgeAddress() netip.Addr { return e.node(HostCluster).slot.gateway() }

// HostKarmadaURL is karmada-apiserver's URL as the host cluster's pods
// reach it: the forwarder on HostBridgeAddress.
func (e *Env) HostKarmadaURL() string {
	return "https://" + e.hostForward.addr().String()
}

// prepareHost does on the host cluster what a Karmada installation does:
// the karmada-system namespace and the karmada-kubeconfig Secret, whose
// server its pods can reach.
func (e *Env) prepareHost(ctx context.Context) error {
	fw, err := listenForwarder(netip.AddrPortFrom(e.HostBridgeAddress(), 0), hostPort(e.karmada.port))
	if err != nil {
		return err
	}
	e.hostForward = fw
	cs, err := e.HostClient()
	if err != nil {
		return err
	}
	if err := createNamespace(ctx, cs, KarmadaSystem); err != nil {
		return err
	}
	certPEM, keyPEM, err := e.ClientCertificate(KarmadaAdminUser, "system:masters")
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["karmada-apiserver"] = &clientcmdapi.Cluster{Server: e.HostKarmadaURL(), CertificateAuthorityData: e.CAPEM()}
	cfg.AuthInfos[KarmadaAdminUser] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["karmada-apiserver"] = &clientcmdapi.Context{Cluster: "karmada-apiserver", AuthInfo: KarmadaAdminUser}
	cfg.CurrentContext = "karmada-apiserver"
	kubeconfig, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: KarmadaKubeconfigSecret, Namespace: KarmadaSystem},
		Data:       map[string][]byte{KarmadaKubeconfigKey: kubeconfig},
	}
	return create(ctx, cs.CoreV1().Secrets(KarmadaSystem).Create, secret)
}

// forwarder relays TCP connections from a listener the environment owns to
// one loopback address, byte for byte (TLS passes through untouched).
type forwarder struct {
	l      net.Listener
	target string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func listenForwarder(at netip.AddrPort, target string) (*forwarder, error) {
	l, err := net.Listen("tcp", at.String())
	if err != nil {
		return nil, fmt.Errorf("listen on %s for %s: %w", at, target, err)
	}
	f := &forwarder{l: l, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Go(f.serve)
	return f, nil
}

func (f *forwarder) addr() netip.AddrPort { return f.l.Addr().(*net.TCPAddr).AddrPort() }

func (f *forwarder) serve() {
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		f.wg.Go(func() { f.relay(c) })
	}
}

// track registers c for close, or reports that the forwarder is closed.
func (f *forwarder) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	for _, c := range cs {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *forwarder) relay(in net.Conn) {
	defer in.Close()
	out, err := net.Dial("tcp", f.target)
	if err != nil {
		return // the client sees its connection closed, as with the server down
	}
	defer out.Close()
	if !f.track(in, out) {
		return
	}
	defer func() {
		f.mu.Lock()
		delete(f.conns, in)
		delete(f.conns, out)
		f.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close so the other direction can finish, as TCP does.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}

// close stops accepting, cuts every relayed connection and waits for the
// relays to end.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.l.Close()
	f.wg.Wait()
}

// isClosed reports whether close ran.
func (f *forwarder) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// KillContainer kills the running container of a pod in cluster (a member
// or HostCluster) with SIGKILL through the node's CRI, as a crash: no
// SIGTERM, so nothing in it runs its shutdown. The kubelet restarts it as
// the pod's restartPolicy says.
func (e *Env) KillContainer(ctx context.Context, cluster, namespace, pod, container string) error {
	client, done, err := criClient(e.node(cluster).socket())
	if err != nil {
		return err
	}
	defer done()
	list, err := client.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{
			"io.kubernetes.pod.namespace":  namespace,
			"io.kubernetes.pod.name":       pod,
			"io.kubernetes.container.name": container,
		},
	}})
	if err != nil {
		return fmt.Errorf("list containers of %s/%s in %s: %w", namespace, pod, cluster, err)
	}
	if len(list.Containers) != 1 {
		return fmt.Errorf("%d running containers %s in pod %s/%s of %s, want 1", len(list.Containers), container, namespace, pod, cluster)
	}
	// A zero timeout skips the stop signal: containerd sends SIGKILL at once.
	if _, err := client.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: list.Containers[0].Id, Timeout: 0}); err != nil {
		return fmt.Errorf("kill container %s of %s/%s in %s: %w", container, namespace, pod, cluster, err)
	}
	return nil
}
