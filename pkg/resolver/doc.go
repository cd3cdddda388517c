// Package resolver maps a pod template in karmada-apiserver to the member
// cluster that runs it, for the proxy's exec, attach, log and portforward
// rewrites. It reads only the shared informer caches of pkg/karmada (pods
// metadata, ResourceBindings indexed by spec.resource, Clusters): a lookup
// makes no API call to karmada-apiserver. Only when acting as the gateway
// (below) does it read one object's metadata in the chosen member, to prove
// the object there is the template's own copy.
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
//     binding's spec.clusters (applied ones, when acting as the gateway)
//     and names a Cluster in the cache is the answer
//     (source "label") if that Cluster is Ready=True, else 503 naming it and
//     its condition message. Anyone who can create a pod can write its
//     labels, so the label only ever chooses among the clusters Karmada
//     placed the pod on: in authorize mode the gateway calls the cluster
//     proxy as itself, and a forged label must not aim that elsewhere. A
//     value that is not a DNS-1123 label, is outside the placement, or names
//     no known Cluster is logged and the binding decides.
//  4. Placement: candidates are the spec.clusters the binding's
//     aggregatedStatus reports applied=true, or every spec.clusters entry
//     when none is applied yet (not when acting as the gateway, below). The answer is the first candidate in
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
// # Acting as the gateway
//
// With Options.ActsAsGateway (cmd/gateway sets it in authorize mode, where
// the proxy calls the cluster proxy with the gateway's own identity after
// a SubjectAccessReview about the caller's template), an answer must be a
// member whose object is the template's own copy; a name proves nothing,
// since a member can hold an object of the same name that Karmada does not
// manage. Rules 3 and 4 change, and a rule 5 follows:
//
//   - Rule 3: the label is followed only to a cluster the binding's
//     aggregatedStatus reports applied=true.
//   - Rule 4: candidates are only the applied clusters, never every
//     scheduled one. With none: 409 Conflict when Karmada reports it tried
//     and failed (applied=false with its appliedMessage, such as "already
//     exists in the cluster member1 ... Karmada will not manage this
//     resource"), quoting that message: the state conflicts with the request
//     and retrying does not help until someone removes the member's object.
//     Otherwise 503 with Retry-After: Karmada is still applying it (seconds;
//     executors wait for the template to be Running, which Karmada reports
//     only after the copy exists, so they never see this).
//   - Rule 5: the chosen member's object is read as the gateway through the
//     cluster proxy (PartialObjectMetadata, resourceVersion=0: the member's
//     watch cache) and must carry Karmada's karmada.io/managed=true label and
//     resourcetemplate.karmada.io/uid equal to the template's UID. Otherwise
//     409 Conflict saying it is not Karmada's copy (not managed, or
//     propagated from another template of that name: a template deleted and
//     created again gets a new UID, so a stale binding status cannot point
//     at the earlier copy); 503 when it is missing (Karmada is creating it)
//     or cannot be read. Nothing is forwarded in any of these cases.
//
// ResolveService follows the same rules with the Service's UID, and has no
// selected-pods fallback there: without a ResourceBinding no member Service
// is Karmada's copy, so it answers 503 not placed.
//
// Passthrough mode does not set ActsAsGateway: the cluster proxy
// impersonates the caller and the member authorizes that identity, which
// could reach the same member object through clusters/<c>/proxy itself.
//
// # Pinned cluster
//
// A request the proxy received under /clusters/<name>/ (a server URL per
// member, to reach each copy of a Duplicated pod) carries <name> in its
// context (WithPinnedCluster). Rule 3 and rule 4 are replaced: the answer
// is <name> (source "path") if the binding schedules the object there,
// else 404 NotFound naming the clusters it does schedule it to; acting as
// the gateway, also only if Karmada reports its copy applied there (409 or
// 503 as rule 4 says), and rule 5 follows. A cluster that is not a
// registered Ready Cluster is 503 as in rule 3. Rules 1 and 2 are
// unchanged, so a pin never reaches an object Karmada did not place, and
// never another cluster than the one named.
//
// Every pod resolution counts resolve_total{source,result} with result ok,
// not_found, not_placed, cluster_not_ready, and acting as the gateway
// not_applied (rule 4) or not_copy (rule 5).
package resolver
