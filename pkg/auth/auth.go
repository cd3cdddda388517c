package auth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
)

// Defaults for Options.
const (
	DefaultCacheTTL         = 10 * time.Second
	DefaultNegativeCacheTTL = 2 * time.Second
	DefaultMaxCacheEntries  = 10000
	// DefaultTimeout bounds one TokenReview or SubjectAccessReview: each
	// stands before a client's request, which must not hang on a hung
	// karmada-apiserver.
	DefaultTimeout = 10 * time.Second
	// DefaultFailedPerSource is Options.FailedPerSource's default: a
	// source may fail ten authentications a second (twice that at once).
	DefaultFailedPerSource rate.Limit = 10
	// KnownCredentialTTL is how long a credential that authenticated
	// counts as known good: its later reviews go by Options.Client and
	// no source limit applies to it. Only its hash is kept, and it never
	// stands in for a TokenReview.
	KnownCredentialTTL = time.Hour
)

// maxSources bounds the per-source failure limiters kept.
const maxSources = 10000

// maxCachedEntryBytes keeps one cache entry small: identities and denial
// messages carry client-chosen strings (impersonated names), and the entry
// count bound alone would let a caller park megabytes per entry.
const maxCachedEntryBytes = 8 << 10

// Result values of metrics.AuthDecisionsTotal.
const (
	resultAllowed         = "allowed"
	resultDenied          = "denied"
	resultUnauthenticated = "unauthenticated"
	resultError           = "error"
	resultThrottled       = "throttled"
)

// Options configures an Authorizer.
type Options struct {
	// Client talks to karmada-apiserver with the gateway's own identity; it
	// needs create on tokenreviews and subjectaccessreviews.
	Client kubernetes.Interface
	// ClientCAPool returns the pool that verifies client certificates
	// (--client-ca-file). It is asked on every verification, so a CA bundle
	// reloaded from disk applies from the next request on without a
	// restart. Nil turns x509 authentication off.
	ClientCAPool func() *x509.CertPool
	// CacheTTL is how long authentications and allowed decisions are
	// reused. Zero means DefaultCacheTTL.
	CacheTTL time.Duration
	// NegativeCacheTTL is how long rejected tokens and denials are reused,
	// short so a fresh RoleBinding takes effect quickly. Zero means
	// DefaultNegativeCacheTTL; it is capped at CacheTTL.
	NegativeCacheTTL time.Duration
	// MaxCacheEntries bounds the cache (least recently used entries go
	// first). Zero means DefaultMaxCacheEntries.
	MaxCacheEntries int
	// Metrics receives AuthDecisionsTotal; nil records nothing.
	Metrics *metrics.Metrics
	// Timeout bounds each TokenReview and SubjectAccessReview; past it the
	// client gets a 504 Status. Zero means DefaultTimeout.
	Timeout time.Duration
	// NewCredentialClient, when set, sends the TokenReviews of credentials
	// not seen authenticated within KnownCredentialTTL, so that a flood of
	// random tokens spends its own rate limit (client-go's, per client),
	// not that of Client, which reviews the credentials known good and
	// sends every SubjectAccessReview: a legitimate caller's cache miss
	// never queues behind a flood. Nil uses Client.
	NewCredentialClient kubernetes.Interface
	// FailedPerSource bounds, per source address (the connection's peer),
	// the credentials that fail to authenticate: past it, a request from
	// that source with a credential not known good is answered 429 without
	// a TokenReview. Zero means DefaultFailedPerSource, negative none.
	FailedPerSource rate.Limit
	// NewCredentialQPS and NewCredentialBurst pace the TokenReviews of
	// credentials not known good, serving first the sources with no
	// credential rejected lately (reviewQueue): set them to
	// NewCredentialClient's limits. Zero QPS leaves the pacing to that
	// client's own limiter, first come first served.
	NewCredentialQPS   float64
	NewCredentialBurst int
	// Now replaces time.Now, for tests.
	Now func() time.Time
}

// Authorizer implements proxy.Authorizer against karmada-apiserver.
type Authorizer struct {
	client      kubernetes.Interface
	clientCAs   func() *x509.CertPool
	ttl         time.Duration
	negativeTTL time.Duration
	cache       *cache.LRUExpireCache
	metrics     *metrics.Metrics
	now         func() time.Time
	timeout     time.Duration
	// flights collapses concurrent cache misses for one key (a credential,
	// its impersonation, a whole decision) into one set of API calls: a
	// runner starting 100 jobs with one token costs one TokenReview and one
	// SubjectAccessReview, not 100 of each.
	flights singleflight.Group
	// missed, when set (tests), is called on every cache miss before the
	// miss joins or starts a flight.
	missed func(key string)
	// newCredentials reviews credentials not known good; known holds the
	// hashes of those that authenticated; failures the per-source
	// limiters of failed authentications.
	newCredentials  kubernetes.Interface
	known           *cache.LRUExpireCache
	failures        *cache.LRUExpireCache
	failuresMu      sync.Mutex // sourceLimiter's lookup and add
	failedPerSource rate.Limit
	// newReviews paces newCredentials' TokenReviews, clean sources first
	// (nil: not paced here).
	newReviews *reviewQueue
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// New validates opts and returns an Authorizer.
func New(opts Options) (*Authorizer, error) {
	if opts.Client == nil {
		return nil, errors.New("auth: Options.Client is required")
	}
	if opts.CacheTTL < 0 || opts.NegativeCacheTTL < 0 || opts.MaxCacheEntries < 0 || opts.Timeout < 0 {
		return nil, errors.New("auth: cache TTLs, size and timeout must not be negative")
	}
	a := &Authorizer{
		client:      opts.Client,
		clientCAs:   opts.ClientCAPool,
		ttl:         opts.CacheTTL,
		negativeTTL: opts.NegativeCacheTTL,
		metrics:     opts.Metrics,
		now:         opts.Now,
		timeout:     opts.Timeout,
	}
	if a.timeout == 0 {
		a.timeout = DefaultTimeout
	}
	if a.ttl == 0 {
		a.ttl = DefaultCacheTTL
	}
	if a.negativeTTL == 0 {
		a.negativeTTL = DefaultNegativeCacheTTL
	}
	a.negativeTTL = min(a.negativeTTL, a.ttl)
	if a.now == nil {
		a.now = time.Now
	}
	size := opts.MaxCacheEntries
	if size == 0 {
		size = DefaultMaxCacheEntries
	}
	a.cache = cache.NewLRUExpireCacheWithClock(size, clockFunc(a.now))
	a.known = cache.NewLRUExpireCacheWithClock(size, clockFunc(a.now))
	a.failures = cache.NewLRUExpireCacheWithClock(maxSources, clockFunc(a.now))
	a.newCredentials = opts.NewCredentialClient
	if a.newCredentials == nil {
		a.newCredentials = a.client
	}
	a.failedPerSource = opts.FailedPerSource
	if a.failedPerSource == 0 {
		a.failedPerSource = DefaultFailedPerSource
	}
	a.newReviews = newReviewQueue(opts.NewCredentialQPS, opts.NewCredentialBurst)
	return a, nil
}

// trace notes how one request was answered: the cache label of
// AuthDecisionsTotal is "hit" only when a cached entry answered it without
// any call to karmada-apiserver.
type trace struct{ calledAPI, usedCache bool }

func (t *trace) cacheLabel() string {
	if t.usedCache && !t.calledAPI {
		return "hit"
	}
	return "miss"
}

// decision is a cached outcome: of a TokenReview, of the impersonation
// checks, or of a whole AuthorizeResource. requestor is who authenticated,
// known also when the decision refused.
type decision struct {
	caller    identity.Caller
	requestor identity.Caller
	err       error
}

// AuthorizeResource implements proxy.Authorizer. The whole decision
// (identity, impersonation and the SubjectAccessReview) is cached under the
// credential's hash, the requested impersonation and every field of rr, so a
// hit costs no API call at all.
func (a *Authorizer) AuthorizeResource(ctx context.Context, r *http.Request, rr identity.ResourceRequest) (identity.Caller, error) {
	tr := &trace{}
	caller, err := a.authorizeResource(ctx, r, rr, tr)
	a.record(ctx, "AuthorizeResource", caller, err, tr, "namespace", rr.Namespace, "verb", rr.Verb,
		"group", rr.Group, "resource", rr.Resource, "subresource", rr.Subresource, "name", rr.Name)
	return caller, err
}

func (a *Authorizer) authorizeResource(ctx context.Context, r *http.Request, rr identity.ResourceRequest, tr *trace) (identity.Caller, error) {
	if rr.Resource == "" {
		// A bug in the caller, not the client's doing: an empty resource
		// would ask about something else than the request. An empty verb
		// is kube-apiserver's for a method it has none for (OPTIONS), which
		// only a "*" rule allows: asked as it is.
		return identity.Caller{}, apierrors.NewInternalError(fmt.Errorf("incomplete resource request %+v", rr))
	}
	cred, imp, err := a.credentialAndImpersonation(ctx, r, tr)
	if err != nil {
		return identity.Caller{}, err
	}
	key := cacheKey("resource", cred.key, impersonationKey(imp), rr.Namespace, rr.Verb, rr.Group, rr.Resource, rr.Subresource, rr.Name)
	d, err := a.cached(ctx, key, tr, func(ctx context.Context, tr *trace) (decision, error) {
		ec, err := a.effectiveCaller(ctx, cred, imp, tr)
		if err != nil {
			return decision{requestor: ec.requestor}, err
		}
		attrs := resourceAttributes(rr)
		allowed, reason, err := a.review(ctx, ec.caller, attrs, tr)
		if err != nil {
			return decision{requestor: ec.requestor}, err
		}
		if !allowed {
			d := decision{err: forbidden(ec.caller.Name, attrs, reason), requestor: ec.requestor}
			a.store(key, d, a.negativeTTL, len(d.err.Error())+callerSize(ec.requestor))
			return d, nil
		}
		d := decision{caller: ec.caller, requestor: ec.requestor}
		a.store(key, d, a.ttl, callerSize(ec.caller)+callerSize(ec.requestor))
		return d, nil
	})
	attribute(ctx, d.requestor)
	if err != nil {
		return identity.Caller{}, err
	}
	return copyCaller(d.caller), d.err
}

// attribute records, for the request's audit events, who authenticated,
// whatever was then decided.
func attribute(ctx context.Context, requestor identity.Caller) {
	if requestor.Name != "" {
		identity.AttributionFrom(ctx).Set(copyCaller(requestor))
	}
}

// flight is what one shared computation of cached answers.
type flight struct {
	d  decision
	tr trace
}

// cached answers key from the cache or, on a miss, from compute, which
// stores what it found worth caching. Concurrent misses for one key share
// one compute: it runs detached from the first caller's cancellation (each
// API call it makes has its own deadline, see call), so a caller who gives
// up fails alone and the others still get the answer. A decision (allowed
// or denied) comes back in the decision; an error is a failure to decide.
func (a *Authorizer) cached(ctx context.Context, key string, tr *trace, compute func(context.Context, *trace) (decision, error)) (decision, error) {
	if v, ok := a.cache.Get(key); ok {
		tr.usedCache = true
		return v.(decision), nil
	}
	if a.missed != nil {
		a.missed(key)
	}
	ch := a.flights.DoChan(key, func() (any, error) {
		// A caller that missed just before the previous flight stored its
		// answer would otherwise ask the API again.
		if v, ok := a.cache.Get(key); ok {
			return flight{d: v.(decision), tr: trace{usedCache: true}}, nil
		}
		var ftr trace
		d, err := compute(context.WithoutCancel(ctx), &ftr)
		return flight{d: d, tr: ftr}, err
	})
	select {
	case res := <-ch:
		f, _ := res.Val.(flight)
		tr.calledAPI = tr.calledAPI || f.tr.calledAPI
		tr.usedCache = tr.usedCache || f.tr.usedCache
		return f.d, res.Err
	case <-ctx.Done():
		return decision{}, unavailable("request cancelled while waiting for authorization", context.Cause(ctx), "")
	}
}

// call runs one review against karmada-apiserver within a.timeout. A
// review that ran out of it is a 504 naming karmada-apiserver; any other
// failure a 503 with msg. secret is removed from the cause kept for logs.
func (a *Authorizer) call(ctx context.Context, what, msg, secret string, do func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	err := do(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return timedOut(fmt.Sprintf("karmada-apiserver did not answer the %s within %s (--auth-timeout)", what, a.timeout), err, secret)
	default:
		return unavailable(msg, err, secret)
	}
}

// resourceAttributes are the SubjectAccessReview attributes kube-apiserver
// builds for rr. RBAC ignores the version; the core group's only one is
// given, as kube-apiserver gives the one in the path, for webhook
// authorizers that look at it.
func resourceAttributes(rr identity.ResourceRequest) *authorizationv1.ResourceAttributes {
	attrs := &authorizationv1.ResourceAttributes{
		Namespace:   rr.Namespace,
		Verb:        rr.Verb,
		Group:       rr.Group,
		Resource:    rr.Resource,
		Subresource: rr.Subresource,
		Name:        rr.Name,
	}
	if rr.Group == "" {
		attrs.Version = "v1"
	}
	return attrs
}

// Authenticate implements proxy.Authorizer. It honours Impersonate-* headers
// as AuthorizeResource does, so the Caller it returns is the identity the
// gateway may act as; a caller who may not impersonate gets 403 rather than
// their own identity, which would silently drop what they asked for. Like
// AuthorizeResource, each call counts as one AuthDecisionsTotal sample.
func (a *Authorizer) Authenticate(ctx context.Context, r *http.Request) (identity.Caller, error) {
	tr := &trace{}
	caller, err := a.authenticateRequest(ctx, r, tr)
	a.record(ctx, "Authenticate", caller, err, tr)
	return caller, err
}

func (a *Authorizer) authenticateRequest(ctx context.Context, r *http.Request, tr *trace) (identity.Caller, error) {
	cred, imp, err := a.credentialAndImpersonation(ctx, r, tr)
	if err != nil {
		return identity.Caller{}, err
	}
	ec, err := a.effectiveCaller(ctx, cred, imp, tr)
	attribute(ctx, ec.requestor)
	if err != nil {
		return identity.Caller{}, err
	}
	return copyCaller(ec.caller), nil
}

// credentialAndImpersonation reads what r presents and asks for. Malformed
// Impersonate-* headers are reported only once the credential is known to be
// good, since kube-apiserver authenticates before it looks at impersonation
// and an unauthenticated client should learn nothing but 401.
func (a *Authorizer) credentialAndImpersonation(ctx context.Context, r *http.Request, tr *trace) (credential, *identity.Impersonation, error) {
	cred, err := a.credentialOf(r)
	if err != nil {
		return credential{}, nil, err
	}
	imp, err := identity.ParseImpersonation(r.Header)
	if err != nil {
		requestor, authErr := a.authenticate(ctx, cred, tr)
		if authErr != nil {
			return credential{}, nil, authErr
		}
		attribute(ctx, requestor)
		return credential{}, nil, err
	}
	return cred, imp, nil
}

// effective is the identity a request acts as (caller) and who
// authenticated (requestor): the same without impersonation.
type effective struct{ caller, requestor identity.Caller }

// effectiveCaller authenticates cred and applies imp after checking each
// impersonated item, caching the outcome per credential and impersonation.
// The requestor is known once the credential authenticated, also when the
// impersonation is refused.
func (a *Authorizer) effectiveCaller(ctx context.Context, cred credential, imp *identity.Impersonation, tr *trace) (effective, error) {
	requestor, err := a.authenticate(ctx, cred, tr)
	if err != nil || imp == nil {
		return effective{caller: requestor, requestor: requestor}, err
	}
	key := cacheKey("impersonate", cred.key, impersonationKey(imp))
	d, err := a.cached(ctx, key, tr, func(ctx context.Context, tr *trace) (decision, error) {
		for _, attrs := range impersonationChecks(imp) {
			allowed, reason, err := a.review(ctx, requestor, attrs, tr)
			if err != nil {
				return decision{}, err
			}
			if !allowed {
				err := forbidden(requestor.Name, attrs, reason)
				a.store(key, decision{err: err}, a.negativeTTL, len(err.Error()))
				return decision{err: err}, nil
			}
		}
		caller := imp.Caller()
		a.store(key, decision{caller: caller}, a.ttl, callerSize(caller))
		return decision{caller: caller}, nil
	})
	if err != nil {
		return effective{requestor: requestor}, err
	}
	return effective{caller: d.caller, requestor: requestor}, d.err
}

// review asks karmada-apiserver whether who may do attrs.
func (a *Authorizer) review(ctx context.Context, who identity.Caller, attrs *authorizationv1.ResourceAttributes, tr *trace) (allowed bool, reason string, err error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: attrs,
		User:               who.Name,
		UID:                who.UID,
		Groups:             who.Groups,
		Extra:              toExtraValues(who.Extra),
	}}
	tr.calledAPI = true
	var res *authorizationv1.SubjectAccessReview
	err = a.call(ctx, "SubjectAccessReview", "authorization unavailable", "", func(ctx context.Context) (err error) {
		res, err = a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "SubjectAccessReview failed", "user", who.Name, "verb", attrs.Verb, "resource", attrs.Resource, "subresource", attrs.Subresource)
		return false, "", err
	}
	if res.Status.EvaluationError != "" {
		klog.FromContext(ctx).V(2).Info("SubjectAccessReview evaluation error", "user", who.Name, "error", res.Status.EvaluationError)
	}
	return res.Status.Allowed, res.Status.Reason, nil
}

// forbidden builds the 403 kube-apiserver's authorization and impersonation
// filters write (responsewriters.ForbiddenStatusError), message included.
func forbidden(user string, attrs *authorizationv1.ResourceAttributes, reason string) *apierrors.StatusError {
	resource := attrs.Resource
	if attrs.Subresource != "" {
		resource += "/" + attrs.Subresource
	}
	var msg string
	if attrs.Namespace != "" {
		msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", user, attrs.Verb, resource, attrs.Group, attrs.Namespace)
	} else {
		msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", user, attrs.Verb, resource, attrs.Group)
	}
	msg = htmlSanitizer.Replace(msg)
	if reason != "" {
		msg += ": " + reason
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: attrs.Group, Resource: attrs.Resource}, attrs.Name, errors.New(msg))
}

// htmlSanitizer is the escaping kube-apiserver applies to forbidden messages.
var htmlSanitizer = strings.NewReplacer(`&`, "&amp;", `<`, "&lt;", `>`, "&gt;")

func unauthorized() *apierrors.StatusError { return apierrors.NewUnauthorized("Unauthorized") }

// unavailableError is a 503 Status for the client that keeps the cause for
// the gateway's own logs.
type unavailableError struct {
	status *apierrors.StatusError
	cause  error
	// causeText is cause.Error() with the caller's token removed.
	causeText string
}

func (e *unavailableError) Error() string         { return e.status.Error() + ": " + e.causeText }
func (e *unavailableError) Status() metav1.Status { return e.status.Status() }
func (e *unavailableError) Unwrap() error         { return e.cause }

func unavailable(msg string, cause error, secret string) error {
	return &unavailableError{status: apierrors.NewServiceUnavailable(msg), cause: cause, causeText: redact(cause, secret)}
}

// timedOut is unavailable's 504 Gateway Timeout for a review that hung.
func timedOut(msg string, cause error, secret string) error {
	return &unavailableError{status: apierrors.NewTimeoutError(msg, 0), cause: cause, causeText: redact(cause, secret)}
}

func redact(cause error, secret string) string {
	text := cause.Error()
	if secret != "" {
		text = strings.ReplaceAll(text, secret, "[redacted]")
	}
	return text
}

func resultOf(err error) string {
	switch {
	case err == nil:
		return resultAllowed
	case apierrors.IsUnauthorized(err):
		return resultUnauthenticated
	case apierrors.IsTooManyRequests(err):
		return resultThrottled
	case apierrors.IsForbidden(err), apierrors.IsBadRequest(err):
		return resultDenied
	default:
		return resultError
	}
}

func (a *Authorizer) record(ctx context.Context, op string, caller identity.Caller, err error, tr *trace, kv ...any) {
	result := resultOf(err)
	if a.metrics != nil {
		a.metrics.AuthDecisionsTotal.WithLabelValues(result, tr.cacheLabel()).Inc()
	}
	if logger := klog.FromContext(ctx).V(4); logger.Enabled() {
		kv = append(kv, "op", op, "result", result, "cache", tr.cacheLabel(), "user", caller.Name)
		if err != nil {
			kv = append(kv, "reason", err.Error())
		}
		logger.Info("Auth decision", kv...)
	}
}

// store caches v unless it is too big to be worth holding.
func (a *Authorizer) store(key string, v any, ttl time.Duration, size int) {
	if size > maxCachedEntryBytes {
		return
	}
	a.cache.Add(key, v, ttl)
}

// cacheKey hashes length-prefixed fields, so no choice of field values can
// collide with another and the key size is fixed whatever the client sends.
func cacheKey(kind string, fields ...string) string {
	h := sha256.New()
	writeField(h, kind)
	for _, f := range fields {
		writeField(h, f)
	}
	return kind + ":" + hex.EncodeToString(h.Sum(nil))
}

func writeField(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

func toExtraValues(extra map[string][]string) map[string]authorizationv1.ExtraValue {
	if len(extra) == 0 {
		return nil
	}
	out := make(map[string]authorizationv1.ExtraValue, len(extra))
	for k, v := range extra {
		out[k] = authorizationv1.ExtraValue(slices.Clone(v))
	}
	return out
}

// copyCaller keeps cached identities immutable when callers append to or
// edit what they are given.
func copyCaller(c identity.Caller) identity.Caller {
	c.Groups = slices.Clone(c.Groups)
	if c.Extra != nil {
		extra := make(map[string][]string, len(c.Extra))
		for k, v := range c.Extra {
			extra[k] = slices.Clone(v)
		}
		c.Extra = extra
	}
	return c
}

func callerSize(c identity.Caller) int {
	n := len(c.Name) + len(c.UID)
	for _, g := range c.Groups {
		n += len(g)
	}
	for k, vs := range c.Extra {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}
