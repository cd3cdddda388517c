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
//  2. Label: a cluster.karmada.io/name label whose value is a DNS-1123 label
//     and names a Cluster in the cache is authoritative (source "label"):
//     the answer is that cluster if Ready=True, else 503 naming it and its
//     condition message. A value that is not a DNS-1123 label is logged and
//     ignored (it never reaches a URL). A valid value naming no known Cluster
//     is logged and the binding is consulted; if the binding places the pod
//     nowhere, the 503 names the labelled cluster as unregistered.
//  3. Binding: the pod's ResourceBinding is found through the spec.resource
//     index, never by its name, and must live in the pod's namespace and
//     point at a core v1 Pod (a binding elsewhere cannot steer a pod); one
//     naming another spec.resource.uid belongs to an earlier pod of the same
//     name and is ignored. When several qualify, the lowest name wins and the
//     choice is logged (karmada.Informers.BindingOf, shared with the labeler). Candidates are the
//     spec.clusters the binding's aggregatedStatus reports applied=true, or
//     every spec.clusters entry when none is applied yet. The answer is the
//     first candidate in spec.clusters order (Karmada's scheduler order) that
//     is a Ready Cluster (source "binding"); when none is, 503 names the first
//     candidate and why. More than one candidate counts
//     resolve_ambiguous_total and logs the candidates and the choice.
//  4. No binding, or a binding without clusters: 503 ServiceUnavailable
//     saying the pod is not placed yet (source "none"). 503 rather than 404
//     because the pod exists and placement is usually seconds away; the
//     Status suggests retrying after a second.
//
// Every resolution counts resolve_total{source,result} with result ok,
// not_found, not_placed or cluster_not_ready.
package resolver
