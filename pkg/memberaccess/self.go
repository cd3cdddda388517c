package memberaccess

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
)

// Bounds of Self: how long the gateway's identity is reused (a rotated
// credential, a new client certificate, may name another user), how long a
// failed review's 503 is (so a burst while karmada-apiserver is down costs
// one review), how long karmada-apiserver has to answer.
const (
	selfTTL     = 10 * time.Minute
	selfRetry   = 2 * time.Second
	selfTimeout = 5 * time.Second
	// selfDecisionTTL is how long karmada-apiserver's answer to whether
	// the gateway may use a Cluster's proxy is reused (a refusal or a
	// failure for selfRetry): as briefly as authorize mode's own cache.
	selfDecisionTTL = 10 * time.Second
)

// Self is the gateway's own identity in karmada-apiserver. Where Karmada's
// cluster proxy would act in a member as the gateway, because the gateway
// called it with its own credentials (authorize mode, and the gateway's
// own reads of member objects), a member reached directly acts as Self. It
// is learned from a SelfSubjectReview when first needed.
type Self struct {
	client kubernetes.Interface
	now    func() time.Time
	flight singleflight.Group

	mu      sync.Mutex
	caller  identity.Caller
	err     error
	expires time.Time
	// decisions are karmada-apiserver's answers to whether the gateway
	// may do a ResourceRequest (its clusters/proxy on a Cluster).
	decisions map[identity.ResourceRequest]selfDecision
}

type selfDecision struct {
	err     error
	expires time.Time
}

// NewSelf learns the identity of client's credentials, the gateway's.
func NewSelf(client kubernetes.Interface) *Self {
	return &Self{client: client, now: time.Now, decisions: map[identity.ResourceRequest]selfDecision{}}
}

// ActAs is Caller once karmada-apiserver allows the gateway rr, its
// clusters/proxy on a Cluster with a request's verb
// (identity.ClusterProxyRequest): what karmada-apiserver checks when the
// gateway calls the cluster proxy as itself, so an operator who narrows the
// gateway's clusters/proxy (resourceNames) narrows direct access too. A
// refusal is a 403 naming the gateway's identity, a failed review a 503.
func (s *Self) ActAs(ctx context.Context, rr identity.ResourceRequest) (identity.Caller, error) {
	caller, err := s.Caller(ctx)
	if err != nil {
		return identity.Caller{}, err
	}
	s.mu.Lock()
	d, ok := s.decisions[rr]
	s.mu.Unlock()
	if !ok || !s.now().Before(d.expires) {
		v, _, _ := s.flight.Do(fmt.Sprintf("sar %+v", rr), func() (any, error) {
			err := s.authorize(context.WithoutCancel(ctx), caller, rr)
			ttl := selfDecisionTTL
			if err != nil {
				ttl = selfRetry
			}
			d := selfDecision{err: err, expires: s.now().Add(ttl)}
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.decisions) >= maxSelfDecisions {
				clear(s.decisions)
			}
			s.decisions[rr] = d
			return d, nil
		})
		d = v.(selfDecision)
	}
	if d.err != nil {
		return identity.Caller{}, d.err
	}
	return caller, nil
}

// maxSelfDecisions bounds the decisions kept: one per Cluster and verb.
const maxSelfDecisions = 4096

func (s *Self) authorize(ctx context.Context, caller identity.Caller, rr identity.ResourceRequest) error {
	ctx, cancel := context.WithTimeout(ctx, selfTimeout)
	defer cancel()
	ssar, err := s.client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: rr.Namespace, Verb: rr.Verb, Group: rr.Group, Resource: rr.Resource, Subresource: rr.Subresource, Name: rr.Name},
	}}, metav1.CreateOptions{})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Could not check the gateway's own access to the cluster's proxy", "cluster", rr.Name)
		return apierrors.NewServiceUnavailable(fmt.Sprintf("the gateway could not check with karmada-apiserver that its own identity may use the proxy of cluster %q", rr.Name))
	}
	if !ssar.Status.Allowed {
		resource := rr.Resource
		if rr.Subresource != "" {
			resource += "/" + rr.Subresource
		}
		return apierrors.NewForbidden(schema.GroupResource{Group: rr.Group, Resource: resource}, rr.Name,
			fmt.Errorf("the gateway's own identity %q may not %s it in karmada-apiserver, which Karmada's cluster proxy would require of it", caller.Name, rr.Verb))
	}
	return nil
}

// Caller is the gateway's identity: its user and groups (Karmada passes no
// UID or extra). A review that failed is a 503 for the request that needed
// it.
func (s *Self) Caller(ctx context.Context) (identity.Caller, error) {
	s.mu.Lock()
	if s.now().Before(s.expires) {
		defer s.mu.Unlock()
		return s.caller, s.err
	}
	s.mu.Unlock()
	_, _, _ = s.flight.Do("", func() (any, error) {
		caller, err := s.review(context.WithoutCancel(ctx))
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			klog.FromContext(ctx).Error(err, "Could not learn the gateway's own identity for direct member access")
			s.caller, s.expires = identity.Caller{}, s.now().Add(selfRetry)
			s.err = apierrors.NewServiceUnavailable("the gateway could not learn its own identity from karmada-apiserver, which a member cluster reached directly acts as where Karmada's cluster proxy would act as the gateway")
		} else {
			s.caller, s.err, s.expires = caller, nil, s.now().Add(selfTTL)
		}
		return nil, nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.caller, s.err
}

func (s *Self) review(ctx context.Context) (identity.Caller, error) {
	ctx, cancel := context.WithTimeout(ctx, selfTimeout)
	defer cancel()
	ssr, err := s.client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return identity.Caller{}, fmt.Errorf("SelfSubjectReview: %w", err)
	}
	u := ssr.Status.UserInfo
	if u.Username == "" {
		return identity.Caller{}, fmt.Errorf("SelfSubjectReview named no user")
	}
	return identity.Caller{Name: u.Username, Groups: u.Groups}, nil
}

// partialObjectMetadata asks for an object's metadata alone.
const partialObjectMetadata = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// maxMetadataBody bounds what is read of a member's answer.
const maxMetadataBody = 1 << 20

// Reader reads objects' metadata in members reached directly, as the
// gateway (Self): what karmada.MemberMetadata reads through the cluster
// proxy, for the resolver's check that a member object is the template's
// own copy.
type Reader struct {
	members *Members
	self    *Self
	timeout time.Duration
}

// Reader reads members' objects as self, each read bounded by timeout.
func (m *Members) Reader(self *Self, timeout time.Duration) *Reader {
	return &Reader{members: m, self: self, timeout: timeout}
}

// Metadata GETs namespace/name of resource in cluster as
// PartialObjectMetadata from the member's watch cache (resourceVersion=0).
// A Status answer is returned as an *apierrors.StatusError.
func (r *Reader) Metadata(ctx context.Context, cluster string, resource schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	m, err := r.members.Member(ctx, cluster)
	if err != nil {
		return nil, err
	}
	self, err := r.self.ActAs(ctx, identity.ClusterProxyRequest(http.MethodGet, cluster))
	if err != nil {
		return nil, err
	}
	path := "/api/" + resource.Version
	if resource.Group != "" {
		path = "/apis/" + resource.Group + "/" + resource.Version
	}
	path += "/namespaces/" + namespace + "/" + resource.Resource + "/" + name + "?resourceVersion=0"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.Base.String()+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", partialObjectMetadata)
	m.SetIdentity(req.Header, self)
	res, err := m.For(false).RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("%s", m.Scrub(err.Error()))
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxMetadataBody))
	if err != nil {
		return nil, fmt.Errorf("reading the member's answer: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		var st metav1.Status
		if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
			return nil, &apierrors.StatusError{ErrStatus: st}
		}
		return nil, apierrors.NewGenericServerResponse(res.StatusCode, http.MethodGet, resource.GroupResource(), name, strings.TrimSpace(string(body)), 0, false)
	}
	var out metav1.PartialObjectMetadata
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("decoding the member's answer: %w", err)
	}
	return &out, nil
}
