package auth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	asn1util "k8s.io/apimachinery/pkg/apis/asn1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

// credentialIDKey is the user extra kube-apiserver sets for x509 callers.
const credentialIDKey = "authentication.kubernetes.io/credential-id"

// credential is what a request presented, found without calling the API.
type credential struct {
	// key identifies the credential in cache keys: a SHA-256, never the
	// secret itself.
	key string
	// token is the bearer token; empty for certificates.
	token string
	// cert is the identity of a verified client certificate.
	cert *identity.Caller
	// source is the connection's peer address, which failed
	// authentications are limited per.
	source string
}

// credentialOf picks the bearer token (from Authorization, else from a
// WebSocket bearer subprotocol, as kube-apiserver accepts it from browsers),
// else a verified client certificate, else fails with 401. A certificate is
// verified on every request (not cached) so expiry is honoured to the
// second.
func (a *Authorizer) credentialOf(r *http.Request) (credential, error) {
	token, ok := identity.BearerToken(r.Header)
	if !ok {
		var err error
		if token, ok, err = identity.WebSocketBearerToken(r.Header); err != nil {
			klog.FromContext(r.Context()).V(2).Info("WebSocket bearer token refused", "err", err)
			return credential{}, unauthorized()
		}
	}
	if ok {
		sum := sha256.Sum256([]byte(token))
		source, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			source = r.RemoteAddr
		}
		return credential{key: "token:" + hex.EncodeToString(sum[:]), token: token, source: source}, nil
	}
	if a.clientCAs != nil && identity.HasClientCertificate(r) {
		caller, fingerprint, err := a.verifyClientCert(r.TLS)
		if err != nil {
			klog.FromContext(r.Context()).V(2).Info("Client certificate rejected", "err", err)
			return credential{}, unauthorized()
		}
		return credential{key: "x509:" + fingerprint, cert: &caller}, nil
	}
	return credential{}, unauthorized()
}

// verifyClientCert verifies the peer's chain against ClientCAPool's pool for client
// auth (the TLS server only asks for a certificate) and maps it to a user as
// kube-apiserver's x509 authenticator does: user CN, groups O, UID from the
// Kubernetes UID attribute, credential-id the leaf's SHA-256.
func (a *Authorizer) verifyClientCert(state *tls.ConnectionState) (identity.Caller, string, error) {
	leaf := state.PeerCertificates[0]
	opts := x509.VerifyOptions{
		Roots:       a.clientCAs(),
		CurrentTime: a.now(),
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(state.PeerCertificates) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range state.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
	}
	if _, err := leaf.Verify(opts); err != nil {
		return identity.Caller{}, "", err
	}
	if leaf.Subject.CommonName == "" {
		return identity.Caller{}, "", errString("client certificate has no common name")
	}
	uid, err := certUID(leaf)
	if err != nil {
		return identity.Caller{}, "", err
	}
	sum := sha256.Sum256(leaf.Raw)
	fingerprint := hex.EncodeToString(sum[:])
	return identity.Caller{
		Name:   leaf.Subject.CommonName,
		UID:    uid,
		Groups: identity.WithAuthenticatedGroup(slices.Clone(leaf.Subject.Organization)),
		Extra:  map[string][]string{credentialIDKey: {"X509SHA256=" + fingerprint}},
	}, fingerprint, nil
}

// certUID reads the one optional UID attribute kube-apiserver 1.33+ maps to
// the user's UID (AllowParsingUserUIDFromCertAuth, on by default).
func certUID(cert *x509.Certificate) (string, error) {
	oid := asn1util.X509UID()
	var uids []string
	for _, name := range cert.Subject.Names {
		if !name.Type.Equal(oid) {
			continue
		}
		uid, ok := name.Value.(string)
		if !ok || uid == "" {
			return "", errString("client certificate UID attribute is not a non-empty string")
		}
		uids = append(uids, uid)
	}
	switch len(uids) {
	case 0:
		return "", nil
	case 1:
		return uids[0], nil
	default:
		return "", errString("client certificate has more than one UID attribute")
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// authenticate returns the identity cred stands for. Token reviews are
// cached by the token's hash; failures to reach the API are not.
func (a *Authorizer) authenticate(ctx context.Context, cred credential, tr *trace) (identity.Caller, error) {
	if cred.cert != nil {
		return *cred.cert, nil
	}
	key := cacheKey("token", cred.key)
	d, err := a.cached(ctx, key, tr, func(ctx context.Context, tr *trace) (decision, error) {
		// A credential not known good is reviewed on its own budget, and
		// only while its source has not failed too often.
		client, rejected := a.client, false
		var queue *reviewQueue
		clean := false
		if _, known := a.known.Get(cred.key); !known {
			rec := a.source(cred.source)
			clean = a.isClean(rec)
			done, ok := a.mayTry(rec)
			if !ok {
				return decision{}, throttled()
			}
			defer func() { done(rejected) }()
			client, queue = a.newCredentials, a.newReviews
		}
		review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: cred.token}}
		tr.calledAPI = true
		var res *authenticationv1.TokenReview
		// The wait for the budget counts in --auth-timeout, as the review.
		err := a.call(ctx, "TokenReview", "authentication unavailable", cred.token, func(ctx context.Context) (err error) {
			if err := queue.wait(ctx, clean); err != nil {
				return err
			}
			res, err = client.AuthenticationV1().TokenReviews().Create(ctx, review, metav1.CreateOptions{})
			return err
		})
		if err != nil {
			klog.FromContext(ctx).Error(err, "TokenReview failed")
			return decision{}, err
		}
		// An anonymous identity is not a credential the gateway acts for.
		if !res.Status.Authenticated || res.Status.User.Username == "" || res.Status.User.Username == identity.UserAnonymous {
			// Status.Error is the authenticators' own text; kube-apiserver does
			// not show it to clients either.
			klog.FromContext(ctx).V(2).Info("Token rejected", "reason", strings.ReplaceAll(res.Status.Error, cred.token, "[redacted]"))
			rejected = true
			err := unauthorized()
			a.cache.Add(key, decision{err: err}, a.negativeTTL)
			return decision{err: err}, nil
		}
		a.known.Add(cred.key, struct{}{}, KnownCredentialTTL)
		u := res.Status.User
		caller := identity.Caller{
			Name:   u.Username,
			UID:    u.UID,
			Groups: identity.WithAuthenticatedGroup(slices.Clone(u.Groups)),
		}
		if len(u.Extra) > 0 {
			caller.Extra = make(map[string][]string, len(u.Extra))
			for k, v := range u.Extra {
				caller.Extra[k] = slices.Clone(v)
			}
		}
		a.store(key, decision{caller: caller}, a.ttl, callerSize(caller))
		return decision{caller: caller}, nil
	})
	if err != nil {
		return identity.Caller{}, err
	}
	return d.caller, d.err
}

// sourceRecord is what the gateway keeps of a source's failed
// authentications: how many it may still have, and when its last
// credential was rejected.
type sourceRecord struct {
	limiter      *rate.Limiter
	lastRejected atomic.Int64 // unix nanoseconds; 0: never
}

// suspectFor is how long a source whose credential was rejected has its
// new credentials reviewed after those of every other source.
const suspectFor = time.Minute

// source is source's record. Looking it up and adding it is one step: two
// first requests of a source racing each made a limiter, and the one added
// last forgot what the other's took (a flood got more reviews than the
// burst, seen in CI).
func (a *Authorizer) source(source string) *sourceRecord {
	a.failuresMu.Lock()
	defer a.failuresMu.Unlock()
	if v, ok := a.failures.Get(source); ok {
		return v.(*sourceRecord)
	}
	rec := &sourceRecord{limiter: rate.NewLimiter(a.failedPerSource, 2*int(max(a.failedPerSource, 1)))}
	a.failures.Add(source, rec, suspectFor)
	return rec
}

// isClean reports whether rec's source has had no credential rejected in
// the last suspectFor: its new credentials are reviewed first. A flood's
// sources are rejected all the time; each of its requests, however slow,
// keeps its source suspected.
func (a *Authorizer) isClean(rec *sourceRecord) bool {
	last := rec.lastRejected.Load()
	return last == 0 || a.now().Sub(time.Unix(0, last)) > suspectFor
}

// mayTry reports whether rec's source may have a credential not known
// good reviewed. It takes one of the source's failures before the review,
// so that concurrent requests cannot all pass on the last one; done, once
// the review ended, keeps it taken if the credential was rejected and
// gives it back otherwise: good credentials cost their source nothing.
func (a *Authorizer) mayTry(rec *sourceRecord) (done func(rejected bool), ok bool) {
	if a.failedPerSource < 0 {
		return func(rejected bool) {
			if rejected {
				rec.lastRejected.Store(a.now().UnixNano())
			}
		}, true
	}
	now := a.now()
	r := rec.limiter.ReserveN(now, 1)
	if !r.OK() || r.DelayFrom(now) > 0 {
		r.CancelAt(now)
		return nil, false
	}
	return func(rejected bool) {
		if rejected {
			rec.lastRejected.Store(a.now().UnixNano())
		} else {
			r.CancelAt(a.now())
		}
	}, true
}

// throttled is the 429 kube-apiserver's max-in-flight filter answers, with
// a Retry-After of one second.
func throttled() *apierrors.StatusError {
	return apierrors.NewTooManyRequests("too many failed authentications from this address; retry later", 1)
}
