// Package resolver maps a pod template in karmada-apiserver to the member
// cluster that runs it, for the proxy's exec, attach, log and portforward
// rewrites. It reads only the shared informer caches of pkg/karmada (pods
// metadata, ResourceBindings indexed by spec.resource, Clusters): a lookup
// makes no API call, so a request never waits on karmada-apiserver.
//
// Resolve applies these rules, in this order:
//
//  1. The pod must be in the pods cache, else 404 NotFound
//     (`pods "x" not found`, as kube-apiserver says it).
//  2. Binding: the pod's ResourceBinding is found through the spec.resource
//     index, never by its name, and must live in the pod's namespace and
//     point at a core v1 Pod (a binding elsewhere cannot steer a pod); one
//     naming another spec.resource.uid belongs to an earlier pod of the same
//     name and is ignored. When several qualify, the lowest name wins and the
//     choice is logged (karmada.Informers.BindingOf, shared with the labeler).
//     No binding, or a binding without clusters: 503 ServiceUnavailable
//     saying the pod is not placed yet (source "none"), whatever the pod's
//     labels say. 503 rather than 404 because the pod exists and placement
//     is usually seconds away; the Status suggests retrying after a second.
//  3. Label: a cluster.karmada.io/name label whose value is one of the
//     binding's spec.clusters and names a Cluster in the cache is the answer
//     (source "label") if that Cluster is Ready=True, else 503 naming it and
//     its condition message. Anyone who can create a pod can write its
//     labels, so the label only ever chooses among the clusters Karmada
//     placed the pod on: in authorize mode the gateway calls the cluster
//     proxy as itself, and a forged label must not aim that elsewhere. A
//     value that is not a DNS-1123 label, is outside the placement, or names
//     no known Cluster is logged and the binding decides.
//  4. Placement: candidates are the spec.clusters the binding's
//     aggregatedStatus reports applied=true, or every spec.clusters entry
//     when none is applied yet. The answer is the first candidate in
//     spec.clusters order (Karmada's scheduler order) that is a Ready Cluster
//     (source "binding"); when none is, 503 names the first candidate and
//     why. More than one candidate counts resolve_ambiguous_total and logs
//     the candidates and the choice.
//
// ResolveService (services/proxy) finds the Service in the optional Services
// cache (404 `services "x" not found`), then: its own ResourceBinding (kind
// Service, same namespace and UID rules) decides by rule 4; without one, the
// cluster every selected pod that resolves (rules 1-4) runs on, 409 naming
// the clusters when they differ, 503 when none resolves or it selects nothing.
//
// Every pod resolution counts resolve_total{source,result} with result ok,
// not_found, not_placed or cluster_not_ready.
package resolver
