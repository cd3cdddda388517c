// Package env starts the end-to-end topology as local processes on loopback:
// one etcd, a karmada-apiserver with the Karmada CRDs, member kube-apiservers,
// a real node per member, real Karmada (karmada-aggregated-apiserver,
// -controller-manager, -scheduler and -webhook built from its source, plus
// kube-controller-manager for garbage collection) with every member joined in
// Push mode as `karmadactl join` does, and the gateway as a real process
// built from cmd/gateway.
//
// A member's node is what a real cluster runs: containerd (its own root,
// state and socket under the work dir), a kubelet on it, and the member's
// kube-scheduler and kube-controller-manager (endpoint slices, node
// lifecycle). Three choices keep several environments apart on one machine
// and keep traffic local:
//
//   - The Node is named localhost and the member's kube-apiserver prefers the
//     Hostname address, so the apiserver-to-kubelet hop stays on loopback (a
//     kubelet refuses a loopback node IP; its InternalIP is the bridge
//     address).
//   - Each member claims a slot (a flock'd file under /run, released by the
//     kernel when the process dies, however it dies): the slot names the /24
//     of 198.18.0.0/16 its pods get, the bridge they hang on and the
//     kubelet's cgroupRoot. Distinct cgroup roots matter: a kubelet
//     garbage-collects pod cgroups it does not know below its root, and one
//     containerd per kubelet, because a kubelet removes sandboxes it does
//     not know.
//   - The environment creates the bridge with the host's address itself, and
//     the CNI bridge plugin only attaches veths (no gateway, no masquerade,
//     no default route in pods): pod traffic reaches only the host and the
//     node's own pods.
//
// The machine lacks CAP_SYS_RESOURCE, so containerd runs with
// restrict_oom_score_adj; the kubelet tolerates cgroup v1 and swap, has no
// eviction thresholds and never collects images (they are built locally by
// package images and never pulled: every pod uses imagePullPolicy Never).
// Kubelets authenticate to their apiserver with client certificates
// (system:node:localhost in system:nodes, bound to the system:node role),
// and authorize the apiserver's kubelet client certificate with
// SubjectAccessReviews. containerd's shims leave its process group; Stop
// removes them through the CRI and kills any survivor (see Leftovers).
//
// Everything is generated into a work directory (CA, serving and client
// certificates, static token files, kubeconfigs per user, logs), every port is
// bound to 127.0.0.1 and claimed for the process before a child binds it
// (ports.go: outside the kernel's ephemeral range, locked across processes),
// and every child runs in its own process group so Stop can take the whole
// tree down even when a test fails. Users are static tokens, so RBAC — not
// certificates — decides what each may do:
//
//	admin                  system:masters everywhere; user and group bound to clusters/proxy
//	exec-only              pods + pods/{exec,attach,log,portforward} in namespace e2e; user and group bound to clusters/proxy
//	exec-group-unbound     exec-only's rules, but only its user is bound to clusters/proxy, not its group
//	exec-karmada-only      exec-only's rules in karmada-apiserver only, no clusters/proxy
//	no-exec                get/list pods in e2e, nothing else
//	karmada-exec-gateway   the Helm chart's RBAC (rbac.go): rendered for karmada-apiserver in authorize
//	                       mode and applied as the chart's hook Job does; Karmada propagates the member part
//
// With Options.Host, a Karmada host cluster (host.go) runs beside them, built
// as a member is but not joined: the cluster a user installs the chart in.
// Its kube-apiserver has the ServiceAccount admission and its
// controller-manager the controllers a Deployment, hook Jobs and a
// PodDisruptionBudget need; its containerd holds the gateway image (package
// images' builder, as `make image`) and a static kubectl image, tagged as the
// chart's default values name them. karmada-system holds Karmada's
// karmada-kubeconfig Secret (system:admin in system:masters), whose server is
// a forwarder the environment runs on the host's address on the host
// cluster's bridge, relaying to karmada-apiserver's loopback port; that
// address is in karmada-apiserver's serving certificate, so the slot is
// claimed before certificates are issued. The environment then applies none
// of the chart's RBAC itself: the release's hook Job does.
//
// ClientCertificate issues further identities from the environment's CA, for
// client-certificate callers of an authorize-mode gateway.
//
// In members, Karmada's own ServiceAccounts (karmada-cluster/karmada-<member>
// and karmada-impersonator) authenticate with TokenRequest tokens; what the
// impersonator may impersonate is pushed by Karmada's unified-auth controller
// from the clusters/proxy ClusterRoleBindings above, as on any real Karmada.
package env
