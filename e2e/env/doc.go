// Package env starts the end-to-end topology as local processes on loopback:
// one etcd, a karmada-apiserver with the Karmada CRDs, member kube-apiservers,
// a node agent per member and the Karmada stand-in (in-process), and the
// gateway as a real process built from cmd/gateway.
//
// Everything is generated into a work directory (CA, serving and client
// certificates, static token files, kubeconfigs per user, logs), every port is
// ephemeral and bound to 127.0.0.1, and every child runs in its own process
// group so Stop can take the whole tree down even when a test fails. Users are
// static tokens, so RBAC — not certificates — decides what each may do:
//
//	admin                  system:masters everywhere
//	exec-only              pods + pods/{exec,attach,log,portforward} in namespace e2e, clusters/proxy
//	no-exec                get/list pods in e2e, nothing else
//	karmada-exec-gateway   what the gateway needs in karmada-apiserver and, impersonated, in members
//	<member>-impersonator  in each member: the token the cluster proxy forwards with
package env
