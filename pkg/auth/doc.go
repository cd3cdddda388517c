// Package auth owns the gateway's authorize mode: it authenticates the
// caller itself (bearer token by TokenReview, or a client certificate
// verified against --client-ca-file), applies Impersonate-* headers only
// when a SubjectAccessReview says the caller may impersonate, and authorizes
// the original request (a pod subresource, services/proxy, ...) with a
// SubjectAccessReview against karmada-apiserver, so the gateway can then call
// the cluster proxy with its own identity.
//
// The semantics follow kube-apiserver's authentication, impersonation and
// authorization filters (messages included), because clients print our
// errors as they print the apiserver's. Results are cached briefly in a
// bounded LRU keyed by a SHA-256 of the credential, never the credential.
//
// The proxy defines the Authorizer interface it uses; this package
// implements it with the types of pkg/identity and does not import the
// proxy. Reading credentials off the wire is pkg/identity's; deciding what
// they are worth is this package's.
package auth
