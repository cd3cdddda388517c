// Package labeler owns the controller that keeps karmada.ClusterNameLabel
// (cluster.karmada.io/name=<cluster>) on every Pod template in
// karmada-apiserver that has a ResourceBinding, so the resolver and anyone
// reading the template can see where the pod really runs.
//
// Design: event handlers on the shared pod and binding informers enqueue the
// pod's namespace/name; workers compare the binding's preferred cluster (the
// resolver's rule: spec.clusters order, applied clusters first) with the
// cached label and send a JSON merge patch of that one label only when they
// differ. The labeler only ever adds or corrects the label: a pod without a
// binding is never touched, because the label may have been set by a user or
// another tool, and a binding's deletion means its template is going away.
//
// With leader election (a coordination.k8s.io Lease) the workers run only
// during a term; each term gets a fresh rate-limited queue seeded from the
// caches, and the workers stop before the lease is released, so two replicas
// never patch at once.
package labeler
