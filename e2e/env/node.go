package env

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
)

// NodeName is the one Node of every member: its kubelet registers as
// localhost and kube-apiserver reaches kubelets by hostname, so the
// apiserver-to-kubelet hop (exec, attach, logs, port-forward) stays on
// loopback although a kubelet's InternalIP may not be a loopback address.
func NodeName(string) string { return "localhost" }

// node is one member's node: containerd, the kubelet on it, and the
// member's kube-scheduler and endpoint controllers (nothing else binds
// pods or writes EndpointSlices in a member).
type node struct {
	member string
	dir    string
	slot   *netSlot

	containerd, kubelet, scheduler, controllers *process
	kubeletPort                                 int
	// veths are the pods' host-side interfaces teardown deleted, so
	// Leftovers can tell whether any came back.
	veths []string
}

// socket is containerd's gRPC socket, the kubelet's runtime endpoint.
func (n *node) socket() string { return filepath.Join(n.dir, "containerd", "containerd.sock") }

// imageInputs is where images.Ensure finds what the images are built from.
func (e *Env) imageInputs(ctx context.Context) (images.Options, error) {
	root := e.opts.Gateway.SourceDir
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	cmd.Dir = filepath.Join(root, "hack", "tools")
	out, err := cmd.Output()
	if err != nil {
		return images.Options{}, fmt.Errorf("find k8s.io/kubernetes for pause.c in %s (make tools downloads it): %w", cmd.Dir, err)
	}
	return images.Options{
		CacheDir:     e.opts.ImageCacheDir,
		PauseSource:  filepath.Join(strings.TrimSpace(string(out)), "build", "pause", "linux", "pause.c"),
		E2EModuleDir: filepath.Join(root, "e2e"),
	}, nil
}

func (e *Env) buildImages(ctx context.Context) (string, error) {
	opts, err := e.imageInputs(ctx)
	if err != nil {
		return "", err
	}
	return images.Ensure(ctx, opts)
}

// startNodes starts every member's node and waits until each Node is Ready.
func (e *Env) startNodes(ctx context.Context) error {
	<-e.imagesDone
	if e.imagesErr != nil {
		return fmt.Errorf("build images: %w", e.imagesErr)
	}
	clusters := e.clusters()
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i, m := range clusters {
		n := e.nodes[m] // the host's node exists already: its slot is claimed early
		if n == nil {
			n = &node{member: m, dir: filepath.Join(e.workDir, "nodes", m)}
			e.nodes[m] = n
		}
		wg.Go(func() {
			if err := e.startNode(ctx, n); err != nil {
				errs[i] = fmt.Errorf("node of %s: %w", m, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, m := range clusters {
		if err := e.waitNodeReady(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (e *Env) startNode(ctx context.Context, n *node) error {
	if n.slot == nil {
		var err error
		if n.slot, err = claimNetSlot(); err != nil {
			return err
		}
	}
	if p := e.pull[n.member]; p != nil {
		n.slot.netns = p.netns
	}
	if err := n.slot.createBridge(); err != nil {
		return err
	}
	for _, d := range []string{"containerd", "cni", "cni-ipam", "kubelet", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := e.startContainerd(ctx, n); err != nil {
		return err
	}
	if err := images.Import(ctx, "", n.socket(), e.imagesTar); err != nil {
		return err
	}
	if n.member == HostCluster {
		<-e.hostImagesDone
		if e.hostImagesErr != nil {
			return fmt.Errorf("build the host cluster's images: %w", e.hostImagesErr)
		}
		if err := images.Import(ctx, "", n.socket(), e.hostImagesTar); err != nil {
			return err
		}
	}
	if err := e.bindNodes(ctx, n.member); err != nil {
		return err
	}
	if err := createCgroup(n.slot.cgroupRoot()); err != nil {
		return err
	}
	if err := e.startKubelet(n); err != nil {
		return err
	}
	return e.startMemberControlPlane(n)
}

// containerdConfig is containerd's configuration for one node: everything
// under the node's directory, the CRI plugin on the local images, the
// slot's CNI network and runc with cgroupfs.
func containerdConfig(dir string) string {
	cd := filepath.Join(dir, "containerd")
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  # The machine lacks CAP_SYS_RESOURCE: without this every sandbox fails
  # in runc create.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[8]q
`, filepath.Join(cd, "root"), filepath.Join(cd, "state"), filepath.Join(cd, "containerd.sock"), filepath.Join(cd, "containerd.sock.ttrpc"),
		filepath.Join(cd, "opt"), images.Pause, filepath.Join(dir, "cni"), filepath.Join(cd, "runc"))
}

func (e *Env) startContainerd(ctx context.Context, n *node) error {
	conf, err := n.slot.cniConfig(filepath.Join(n.dir, "cni-ipam"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.dir, "cni", "10-e2e.conflist"), conf, 0o644); err != nil {
		return err
	}
	config := filepath.Join(n.dir, "containerd", "config.toml")
	if err := os.WriteFile(config, []byte(containerdConfig(n.dir)), 0o644); err != nil {
		return err
	}
	n.containerd = e.newProcess("containerd-"+n.member, e.opts.Containerd, "--config", config, "--log-level", "warn")
	// Every image is local. Should a pod ever ask for a pull, the request
	// goes to a closed loopback port instead of resolving and dialing a
	// registry: no name lookup or connection leaves the machine.
	n.containerd.env = []string{"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=", "https_proxy=", "http_proxy=", "no_proxy="}
	n.containerd.netns = e.netnsOf(n.member)
	if err := n.containerd.start(); err != nil {
		return err
	}
	return e.waitRuntime(ctx, n)
}

// waitRuntime waits until containerd's CRI answers.
func (e *Env) waitRuntime(ctx context.Context, n *node) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if !n.containerd.running() {
			return false, n.containerd.exitErr()
		}
		last = criVersion(ctx, n.socket())
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("wait for containerd of %s (%v; log %s): %w", n.member, last, n.containerd.logPath, err)
	}
	return nil
}

// bindNodes grants the kubelet (group system:nodes) the system:node role,
// as a cluster without the Node authorizer does.
func (e *Env) bindNodes(ctx context.Context, member string) error {
	client, err := e.MemberClient(member)
	if err != nil {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e:nodes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bind system:node in %s: %w", member, err)
	}
	return nil
}

func (e *Env) startKubelet(n *node) error {
	nodeName := NodeName(n.member)
	serving, err := e.ca.issue(e.pkiDir, "kubelet-"+n.member, nodeName, nil, loopbackHosts)
	if err != nil {
		return err
	}
	client, err := e.ca.issue(e.pkiDir, "kubelet-client-"+n.member, "system:node:"+nodeName, []string{"system:nodes"}, nil)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(n.dir, "kubelet.kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[n.member] = &clientcmdapi.Cluster{Server: e.members[n.member].url(), CertificateAuthorityData: e.CAPEM()}
	cfg.AuthInfos["kubelet"] = &clientcmdapi.AuthInfo{ClientCertificate: client.CertFile, ClientKey: client.KeyFile}
	cfg.Contexts["kubelet"] = &clientcmdapi.Context{Cluster: n.member, AuthInfo: "kubelet"}
	cfg.CurrentContext = "kubelet"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return err
	}
	if n.kubeletPort, err = freePort(); err != nil {
		return err
	}
	config, err := yaml.Marshal(kubeletConfig(n, serving, e.CAFile()))
	if err != nil {
		return err
	}
	configPath := filepath.Join(n.dir, "kubelet-config.yaml")
	if err := os.WriteFile(configPath, config, 0o644); err != nil {
		return err
	}
	n.kubelet = e.newProcess("kubelet-"+n.member, filepath.Join(e.opts.BinDir, "kubelet"),
		"--config="+configPath,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(n.dir, "kubelet"),
		"--cert-dir="+filepath.Join(n.dir, "kubelet", "pki"),
		"--hostname-override="+nodeName,
		"--node-ip="+n.slot.gateway().String(),
		"--v=1",
	)
	n.kubelet.netns = e.netnsOf(n.member)
	return n.kubelet.start()
}

// kubeletConfig is a kubelet for a shared test machine: on loopback, with
// x509 client authentication and SubjectAccessReview authorization, its
// pods' cgroups under the slot's own root, and no eviction or image garbage
// collection (the disk is shared, the images are never pulled again).
func kubeletConfig(n *node, serving *keyPair, caFile string) *kubeletv1beta1.KubeletConfiguration {
	f, t := false, true
	return &kubeletv1beta1.KubeletConfiguration{
		TypeMeta:                 metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Address:                  "127.0.0.1",
		Port:                     int32(n.kubeletPort),
		ReadOnlyPort:             0,
		HealthzPort:              new(int32),
		TLSCertFile:              serving.CertFile,
		TLSPrivateKeyFile:        serving.KeyFile,
		ContainerRuntimeEndpoint: "unix://" + n.socket(),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: caFile},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: &f},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: &f},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		CgroupDriver:  "cgroupfs",
		CgroupRoot:    n.slot.cgroupRoot(),
		// This machine is on cgroup v1 (hybrid) and has swap.
		FailCgroupV1:                 &f,
		FailSwapOn:                   &f,
		EvictionHard:                 map[string]string{},
		MergeDefaultEvictionSettings: &f,
		ImageGCHighThresholdPercent:  new(int32(100)),
		ImageGCLowThresholdPercent:   new(int32(99)),
		PodLogsDir:                   filepath.Join(n.dir, "pod-logs"),
		// The bench reads a 64 MiB log whole (make bench, logs): at the
		// default 10Mi the kubelet rotated it away, and every read of it got
		// only the newest, empty file.
		ContainerLogMaxSize: "128Mi",
		VolumePluginDir:     filepath.Join(n.dir, "volume-plugins"),
		// No host DNS configuration in pods. The cluster DNS address is the
		// host's on the bridge, where no DNS server listens: pods get the
		// resolv.conf of a cluster, and a lookup fails at once, locally.
		ResolverConfig: new(""),
		ClusterDNS:     []string{n.slot.gateway().String()},
		ClusterDomain:  "cluster.local",
		StaticPodPath:  "",
		RegisterNode:   &t,
		// Pods start and report status without waiting for the defaults' 10s.
		NodeStatusUpdateFrequency: metav1.Duration{Duration: 5 * time.Second},
		SyncFrequency:             metav1.Duration{Duration: 10 * time.Second},
	}
}

// startMemberControlPlane starts the member's kube-scheduler and a
// kube-controller-manager with the controllers a node's pods need: a member
// is a real cluster, and in one nothing else binds pods to the node, lifts
// the not-ready taint a kubelet registers with, or lists pod IPs for
// services/proxy.
func (e *Env) startMemberControlPlane(n *node) error {
	kubeconfig := e.memberLocalKubeconfig(n.member)
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	common := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--v=1",
	}
	n.scheduler = e.newProcess("kube-scheduler-"+n.member, filepath.Join(e.opts.BinDir, "kube-scheduler"),
		append(common, "--secure-port="+strconv.Itoa(ports[0]))...)
	controllers := []string{"--controllers=endpointslice-controller,node-lifecycle-controller"}
	if n.member == HostCluster {
		controllers = e.hostControllerArgs()
	}
	if e.isPull(n.member) {
		// karmada-agent registers with a legacy ServiceAccount token Secret
		// it creates and waits for the token controller to fill, as on a
		// real cluster (pkg/util WaitForServiceAccountSecretCreation).
		controllers = []string{
			"--controllers=endpointslice-controller,node-lifecycle-controller,serviceaccount-token-controller",
			"--root-ca-file=" + e.CAFile(),
			"--service-account-private-key-file=" + filepath.Join(e.pkiDir, "sa.key"),
		}
	}
	n.controllers = e.newProcess("kube-controller-manager-"+n.member, filepath.Join(e.opts.BinDir, "kube-controller-manager"),
		append(append(common, "--secure-port="+strconv.Itoa(ports[1])), controllers...)...)
	for _, p := range []*process{n.scheduler, n.controllers} {
		p.netns = e.netnsOf(n.member)
		if err := p.start(); err != nil {
			return err
		}
	}
	return nil
}

// kubeletStartAttempts bounds how often waitNodeReady starts a kubelet that
// exited before its node was Ready. The kubelet exits 1 when a start-up step
// fails (cAdvisor, the container manager, its internal modules) and, in its
// own words, relies "on the babysitter to retry starting kubelet": a node's
// systemd unit restarts it. CI saw one such exit while three environments
// started at once. A kubelet that cannot start at all still fails the wait,
// with its log's last line.
const kubeletStartAttempts = 3

func (e *Env) waitNodeReady(ctx context.Context, member string) error {
	client, err := e.MemberClient(member)
	if err != nil {
		return err
	}
	n := e.nodes[member]
	var last string
	kubelet := restarter{p: n.kubelet, attempts: 1, max: kubeletStartAttempts, logf: e.logf}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := kubelet.ensureRunning(); err != nil {
			return false, err
		}
		for _, p := range []*process{n.containerd, n.scheduler, n.controllers} {
			if !p.running() {
				return false, p.exitErr()
			}
		}
		node, err := client.CoreV1().Nodes().Get(ctx, NodeName(member), metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return true, nil
				}
				last = "node not Ready: " + c.Message
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("wait for node %s in %s (%s; log %s): %w", NodeName(member), member, last, n.kubelet.logPath, err)
	}
	return nil
}

// KillKubelet kills member's kubelet with SIGKILL, as a crash: containerd
// and the pods keep running, streams through the kubelet break.
func (e *Env) KillKubelet(member string) { e.node(member).kubelet.kill() }

// StartKubelet starts member's kubelet again, with the same configuration
// and port, and waits until the Node is Ready.
func (e *Env) StartKubelet(ctx context.Context, member string) error {
	if err := e.node(member).kubelet.start(); err != nil {
		return err
	}
	return e.waitNodeReady(ctx, member)
}

// KillContainerd kills member's containerd with SIGKILL. The shims and
// containers survive it, as on any node; the kubelet's runtime calls and
// streams through containerd fail until StartContainerd.
func (e *Env) KillContainerd(member string) { e.node(member).containerd.kill() }

// StartContainerd starts member's containerd again on the same root and
// socket and waits until its CRI answers and the Node is Ready.
func (e *Env) StartContainerd(ctx context.Context, member string) error {
	n := e.node(member)
	if err := n.containerd.start(); err != nil {
		return err
	}
	if err := e.waitRuntime(ctx, n); err != nil {
		return err
	}
	return e.waitNodeReady(ctx, member)
}

func (e *Env) node(member string) *node {
	n, ok := e.nodes[member]
	if !ok {
		panic(fmt.Sprintf("env: no node of member %q (members: %v)", member, e.opts.Members))
	}
	return n
}

// nodeErrors reports node processes that exited although nothing stopped
// them on purpose.
func (e *Env) nodeErrors() []error {
	var errs []error
	for _, m := range e.clusters() {
		n := e.nodes[m]
		if n == nil {
			continue
		}
		for _, p := range []*process{n.containerd, n.kubelet, n.scheduler, n.controllers} {
			if p != nil && p.died() {
				errs = append(errs, p.exitErr())
			}
		}
	}
	return errs
}
