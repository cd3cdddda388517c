package identity

import "net/http"

// methodVerbs is the verb kube-apiserver's RequestInfoFactory derives from
// the method of a request that names its object, as a pod subresource and
// {name}/proxy always do (so never list, watch or deletecollection).
// kube-apiserver also proxies OPTIONS, with an empty verb that only a "*"
// rule allows; the gateway's own member RBAC grants no such rule, so
// authorize mode refuses it.
var methodVerbs = map[string]string{
	http.MethodGet:    "get",
	http.MethodHead:   "get",
	http.MethodPost:   "create",
	http.MethodPut:    "update",
	http.MethodPatch:  "patch",
	http.MethodDelete: "delete",
}

// ProxyMethods lists the methods ProxySubresourceRequest has a verb for, for
// Allow.
const ProxyMethods = "GET, HEAD, POST, PUT, PATCH, DELETE"

// PodStreamRequests are what kube-apiserver authorizes a method request on
// the pod subresource (exec, attach, log or portforward) of namespace/pod
// as, in the order it checks them: the verb its RequestInfo derives from the
// method (GET get, POST create), and for a GET of exec, attach or
// portforward, the WebSocket form, also create, which kube-apiserver 1.35+
// requires (AuthorizePodWebsocketUpgradeCreatePermission) so that a get
// grant cannot open a shell. Every one must be allowed.
func PodStreamRequests(method, namespace, pod, subresource string) []ResourceRequest {
	req := ResourceRequest{
		Namespace: namespace, Verb: methodVerbs[method], Resource: "pods",
		Subresource: subresource, Name: pod,
	}
	out := []ResourceRequest{req}
	if method == http.MethodGet && subresource != "log" {
		req.Verb = "create"
		out = append(out, req)
	}
	return out
}

// MethodVerb is the verb kube-apiserver derives from method for a request
// that names its object ("" for a method it has none for).
func MethodVerb(method string) string { return methodVerbs[method] }

// ProxySubresourceRequest is what kube-apiserver authorizes a method request
// on <resource>/<segment>/proxy in namespace as: the proxy subresource of
// pods or services, named by the whole path segment (RequestInfo takes it as
// it is, so RBAC resourceNames must say "https:web:443" to match that form,
// exactly as with kube-apiserver). Unlike pods/exec, a WebSocket GET stays
// get: kube-apiserver's extra create check on upgrades covers exec, attach
// and portforward only. It reports false for a method with no RBAC verb.
func ProxySubresourceRequest(method, namespace, resource, segment string) (ResourceRequest, bool) {
	verb, ok := methodVerbs[method]
	if !ok {
		return ResourceRequest{}, false
	}
	return ResourceRequest{
		Namespace: namespace, Verb: verb, Resource: resource,
		Subresource: "proxy", Name: segment,
	}, true
}

// ClusterProxyRequest is what karmada-apiserver authorizes a request through
// the cluster proxy of cluster as (the proxy subresource of the
// cluster-scoped Cluster, group cluster.karmada.io), with the verb its
// RequestInfo derives from the method. The path names the Cluster, so a
// GET stays get (never list or watch, watch=true included), and a method
// with no verb of its own (OPTIONS) gets the empty verb, which only a "*"
// rule allows, as with kube-apiserver.
func ClusterProxyRequest(method, cluster string) ResourceRequest {
	return ResourceRequest{Verb: methodVerbs[method], Group: "cluster.karmada.io", Resource: "clusters", Subresource: "proxy", Name: cluster}
}
