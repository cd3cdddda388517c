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
// Why our own code and not k8s.io/apiserver's delegating authenticator and
// authorizer behind its authentication, impersonation and authorization
// filters, as kube-rbac-proxy assembles them: they decide the same, and
// cost the gateway twice its size. e2e TestAuthorizeModeDecidesAsKubernetesDelegation
// sends one table of callers (tokens good, bad and absent, client
// certificates of the gateway's CA and of another, impersonation of users,
// groups, UIDs, extras and ServiceAccounts, allowed and refused) and
// requests (exec, attach, log, port-forward, services/proxy,
// ephemeralcontainers, delete) through both against the same
// karmada-apiserver and wants the same status and the same resulting user;
// it fails when, say, system:authenticated is not added. Linking the
// delegation into cmd/gateway (measured 2026-12-06, go1.26.8, k8s.io/apiserver
// v0.37.2) takes the binary from 46.7 to 101.7 MB (stripped 33.4 to 70.9 MB),
// its packages from 782 to 1,062 and its modules from 58 to 85: gRPC,
// OpenTelemetry, cel-go and component-base come with the filters. What the
// gateway needs beyond them stays here either way: a decision cached whole
// under the credential's hash, concurrent misses collapsed, reviews of
// unknown credentials on a rate budget of their own, failed authentications
// limited per source, and errors and metrics the proxy can report.
//
// The proxy defines the Authorizer interface it uses; this package
// implements it with the types of pkg/identity and does not import the
// proxy. Reading credentials off the wire is pkg/identity's; deciding what
// they are worth is this package's.
package auth
