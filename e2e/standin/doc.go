// Package standin is a Karmada stand-in for the end-to-end environment: just
// enough of karmada-aggregated-apiserver and karmada-controller-manager,
// behaving like the real ones, that the gateway can be tested against real
// kube-apiservers without Docker.
//
// It owns two things. The aggregated API (cluster.karmada.io/v1alpha1) is an
// HTTPS server that kube-aggregator in karmada-apiserver proxies to: it
// authenticates the aggregator's front-proxy certificate, serves in-memory
// Cluster objects (list, get, watch; Ready kept by probing each member's
// /readyz) and forwards clusters/{name}/proxy to the member with the
// impersonator token and Impersonate-* headers for the caller, through
// apimachinery's UpgradeAwareHandler so exec/attach/portforward upgrades pass.
// The propagation loop turns Pod templates selected by a PropagationPolicy
// into a ResourceBinding (scheduled once, then followed when spec.clusters is
// changed), a Work per cluster and the member Pod, and carries member status
// back through Karmada's resource interpreter (e2e/interpreter): each member
// pod's status reflected into the binding's aggregatedStatus, then aggregated
// into the template's status. The interpreter is rebuilt from the
// ResourceInterpreterCustomizations in karmada-apiserver whenever they change,
// so their Lua runs as in Karmada and, without one, the template gets
// Karmada's built-in Pod aggregation (phase and nameless {ready, state}).
package standin
