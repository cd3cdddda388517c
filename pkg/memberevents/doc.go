// Package memberevents merges a member cluster's events for a federated pod
// into karmada-apiserver's events for its template, so that executors and
// kubectl, which watch and list events of the pod they created, see why it
// does not start (image pulls, OOM kills) although those events are
// recorded in the member.
//
// It answers GET /api/v1/namespaces/<ns>/events lists and watches whose
// fieldSelector pins involvedObject.name=<pod> with equality (Merger.Claims;
// parseEventsRequest). The selector may also pin kind=Pod, namespace=<ns>,
// apiVersion=v1 and uid (checked against the template), and filter on
// type, reason, source, reportingComponent and involvedObject.fieldPath with
// any operator (passed to the member as written: GitLab Runner lists
// `involvedObject.name=<pod>,type=Warning`). Label selectors, exact
// resourceVersion matches, Table/PartialObjectMetadata or protobuf-only
// Accept, the legacy /watch/ paths and events.k8s.io are not claimed, so the
// proxy passes them through unchanged.
//
// The proxy hands it requests as an EventsMerger and it reaches upstream
// only through Gateway, which *proxy.Proxy implements: karmada-apiserver's
// events and the pod template with the caller's credentials as passthrough
// sends them, the member's through Karmada's cluster proxy with the caller's
// headers (the member's RBAC applies) or, in authorize mode, with the
// gateway's identity once the Authorizer allowed the caller to list or watch
// events in the namespace (Gateway.GetMember). Neither package imports
// the other.
//
// Every member event is rewritten to read as an event of the template
// (rewriteMemberEvent): the template's involvedObject.uid, which executors
// filter on, the name "<cluster>.<name>", the annotation
// MemberClusterAnnotation, and a karmada-apiserver resourceVersion, so a
// client never hands karmada-apiserver a member's resourceVersion.
//
// List merge (list.go): karmada-apiserver's list is read while the member's
// events and the template are read beside it; member events come on the
// last page only (a paginated list holds them once), stamped with the
// list's resourceVersion. A member that cannot be read yields karmada's
// events and a Warning header carrying the member's Status message as text
// (statusMessage, warningHeader). A pod that is not placed, or any answer
// of karmada-apiserver but an EventList, is relayed as it came.
//
// Watch merge (watch.go): karmada-apiserver's watch and a watch of the
// member's events are merged into one JSON watch stream that ends when
// karmada's does (timeoutSeconds included). Without a resourceVersion (or
// "0") karmada's list is sent first as ADDED events and the watch starts
// from its version, as kube-apiserver does; member events start with the
// member's current events as ADDED. A WatchList (sendInitialEvents) gets
// the member's initial events before the initial-events-end bookmark.
// Member events carry the latest karmada resourceVersion the stream has
// passed. A pod not placed yet is waited for; member watches are
// re-established with backoff, re-listed after 410 Gone and follow the pod
// when it fails over to another cluster; a member that cannot be read is
// reported in the stream, once per outage, as a Warning event with reason
// MemberEventsUnavailable.
//
// Cursors and resume: for every karmada resourceVersion it hands out for a
// pod, the merge remembers (eventCursors, an LRU with a TTL) where the
// member's events stood just before the first member event stamped with
// it. A watch resumed from that resourceVersion on the same replica
// continues the member's watch from there and loses nothing (it may repeat
// some). A resourceVersion it does not know (another replica, expired)
// resumes by replaying the member's current events as ADDED: repeats,
// never losses.
package memberevents
