package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"golang.org/x/sync/singleflight"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/cache"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/audit"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

// Bounds of callerReviews: how long a caller's review is reused, how many
// are kept, how long karmada-apiserver has to answer one.
const (
	callerReviewTTL         = 5 * time.Minute
	callerReviewFailedTTL   = 30 * time.Second
	callerReviewMaxEntries  = 10000
	callerReviewTimeout     = 2 * time.Second
	maxCallerReviewBodySize = 64 << 10
)

// callerReviews learns, for passthrough mode's audit events, who a caller
// authenticated as: karmada-apiserver's own answer to a SelfSubjectReview
// sent with the caller's bearer token alone (whom its Impersonate-* headers
// ask for is recorded from the request, as kube-apiserver records it). A
// review is made only once karmada-apiserver accepted the credential on the
// request itself (credentialAccepted), beside the request, never before
// it, and is reused per token hash: random tokens cost karmada-apiserver
// nothing more, and a stream's setup waits for nothing.
type callerReviews struct {
	rt      http.RoundTripper
	url     string
	cache   *cache.LRUExpireCache
	flights singleflight.Group
}

func newCallerReviews(rt http.RoundTripper, base string) *callerReviews {
	return &callerReviews{rt: rt, url: base + "/apis/authentication.k8s.io/v1/selfsubjectreviews", cache: cache.NewLRUExpireCache(callerReviewMaxEntries)}
}

type reviewed struct {
	user identity.Caller
	err  error
}

// lookup is who token authenticates as.
func (c *callerReviews) lookup(token string) (identity.Caller, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if v, ok := c.cache.Get(key); ok {
		return v.(reviewed).user, v.(reviewed).err
	}
	v, _, _ := c.flights.Do(key, func() (any, error) {
		user, err := c.review(token)
		r := reviewed{user: user, err: err}
		ttl := callerReviewTTL
		if err != nil {
			ttl = callerReviewFailedTTL
		}
		c.cache.Add(key, r, ttl)
		return r, nil
	})
	return v.(reviewed).user, v.(reviewed).err
}

func (c *callerReviews) review(token string) (identity.Caller, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callerReviewTimeout)
	defer cancel()
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return identity.Caller{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	res, err := c.rt.RoundTrip(req)
	if err != nil {
		return identity.Caller{}, fmt.Errorf("karmada-apiserver's SelfSubjectReview failed: %w", context.Cause(ctx))
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxCallerReviewBodySize))
	if err != nil {
		return identity.Caller{}, fmt.Errorf("karmada-apiserver's SelfSubjectReview: %w", err)
	}
	if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusOK {
		return identity.Caller{}, fmt.Errorf("karmada-apiserver answered the caller's SelfSubjectReview with %d", res.StatusCode)
	}
	var ssr authnv1.SelfSubjectReview
	if err := json.Unmarshal(b, &ssr); err != nil || ssr.Status.UserInfo.Username == "" {
		return identity.Caller{}, fmt.Errorf("karmada-apiserver's SelfSubjectReview named no user")
	}
	u := ssr.Status.UserInfo
	caller := identity.Caller{Name: u.Username, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		caller.Extra = make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			caller.Extra[k] = v
		}
	}
	return caller, nil
}

// credentialAccepted notes that karmada-apiserver answered a request sent
// with r's credential other than 401: in passthrough mode, an audited
// request then has its caller looked up (callerReviews).
func (p *Proxy) credentialAccepted(r *http.Request, code int) {
	state := stateFrom(r.Context())
	if p.reviews == nil || state == nil || code == http.StatusUnauthorized || !audit.Audited(state.route) {
		return
	}
	token, ok := identity.CallerToken(r.Header)
	if !ok {
		// Accepted without a bearer token (passthrough sends no other
		// credential): karmada-apiserver's anonymous authenticator took it,
		// and names it so in its own audit log.
		state.attribution.Set(identity.Caller{Name: identity.UserAnonymous, Groups: []string{identity.GroupUnauthenticated}})
		return
	}
	state.attribution.Lookup(func() (identity.Caller, error) { return p.reviews.lookup(token) })
}
