package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/apiresponse"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/upstream"
)

// ephemeralSubresource is the pod subresource `kubectl debug` patches to
// add a debug container.
const ephemeralSubresource = "ephemeralcontainers"

// maxEphemeralBody bounds a pods/ephemeralcontainers write's body: a patch
// of one container, or a Pod for PUT.
const maxEphemeralBody = 1 << 20

// ephemeralWriteAttempts is how often the template's write is tried once
// the member's copy has the container: it cannot be taken back there.
const ephemeralWriteAttempts = 3

func isEphemeralSubresource(s string) bool { return s == ephemeralSubresource }

// targetsEphemeralContainers reports whether some plausible reading of u's
// path addresses pods/<x>/ephemeralcontainers (see targetsPodSubresource).
func targetsEphemeralContainers(u *url.URL) bool {
	return pathMayHold(u, "pods", ephemeralSubresource) && anyReading(u, func(s []string) bool {
		return len(s) >= 7 && s[0] == "api" && s[1] == "v1" && s[2] == "namespaces" &&
			s[4] == "pods" && s[6] == ephemeralSubresource
	})
}

// routeEphemeralContainers sends writes of pods/{name}/ephemeralcontainers
// to serve and reads (the template, whose status the Pod status
// interpreter fills from the member) on to karmada-apiserver. Any other
// form is refused as the stream subresources' are: karmada-apiserver must
// never change a template's ephemeral containers without the member's copy
// (Karmada's sync then fails on the pod: a member refuses every other
// change of spec.ephemeralContainers).
func routeEphemeralContainers(serve http.HandlerFunc) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !targetsEphemeralContainers(r.URL) {
				next.ServeHTTP(w, r)
				return
			}
			if _, ok := parsePodPath(r.URL, isEphemeralSubresource); !ok {
				refuse(w, r, apierrors.NewBadRequest(fmt.Sprintf(
					"invalid pod subresource path %q: want /api/v1/namespaces/<namespace>/pods/<name>/ephemeralcontainers with a DNS-1123 label namespace, a DNS-1123 subdomain name and no percent-encoding",
					r.URL.EscapedPath())))
				return
			}
			switch r.Method {
			case http.MethodGet:
				next.ServeHTTP(w, r)
			case http.MethodPatch, http.MethodPut:
				serve(w, r)
			default:
				w.Header().Set("Allow", "GET, PATCH, PUT")
				refuse(w, r, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "pods/ephemeralcontainers"}, r.Method))
			}
		})
	}
}

// serveEphemeralContainers adds ephemeral containers (kubectl debug) to a
// federated pod: to the copy in the member cluster the pod resolves to,
// where the kubelet runs it, and to its template in karmada-apiserver,
// which kubectl watches for the container's status. A member refuses any
// change of spec.ephemeralContainers but through this subresource, so
// Karmada's sync of the pod stays healthy only if both get the same
// containers, and neither can be taken back (nor tried first: the
// subresource has no dry run). So everything that can be checked is
// checked first, as for exec: authorize mode's SubjectAccessReview of the
// write, passthrough's admission check and a SelfSubjectAccessReview of
// the write in karmada-apiserver as the caller, the resolution (the copy
// check, acting as the gateway). Then the member writes its copy: its
// refusal (its RBAC, its Pod Security admission, validation) is relayed
// with nothing changed. Then karmada-apiserver writes the template with
// the caller's credentials, retried while it fails for a passing reason;
// its answer is the client's.
func (p *Proxy) serveEphemeralContainers(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	state := stateFrom(ctx)
	state.route = metrics.RouteEphemeralContainers
	pr, ok := parsePodPath(r.URL, isEphemeralSubresource)
	if !ok { // routeEphemeralContainers refused these
		refuse(w, r, apierrors.NewBadRequest("invalid pod subresource path"))
		return
	}
	state.pod = pr
	logger := klog.FromContext(ctx).WithValues("namespace", pr.Namespace, "pod", pr.Name, "subresource", pr.Subresource)
	body, err := upstream.ReadBodyWithin(w, r, maxEphemeralBody, p.headerTimeout)
	if err != nil {
		apiresponse.WriteStatus(w, err)
		return
	}

	added := debugContainers(body)
	state.ephemeral = added.audit()

	rr := identity.ResourceRequest{Namespace: pr.Namespace, Verb: identity.MethodVerb(r.Method), Resource: "pods", Subresource: ephemeralSubresource, Name: pr.Name}
	if p.authMode == AuthAuthorize {
		if logger, ok = p.authorize(w, r, rr, logger); !ok {
			return
		}
	} else if !p.admittedByKarmada(w, r, podsResource.Resource, pr.Namespace, pr.Name) || !p.callerMay(w, r, rr) {
		return
	}
	if p.recorder != nil && p.recorder.RefusesUnrecorded(pr.Namespace, added.tty()) {
		// A debug container runs its command when the kubelet starts it,
		// whether or not anyone attaches, and nothing records what it does
		// unattached: failing closed, it is refused, as an exec whose
		// session cannot be recorded is.
		logger.V(2).Info("Debug container refused: its command cannot be recorded and recording fails closed")
		apiresponse.WriteStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf(
			"a debug container's command cannot be recorded (it runs whether or not a session attaches to it) and recording fails closed (--record-sessions-fail-closed) in namespace %q: "+
				"use kubectl exec, which is recorded", pr.Namespace)))
		return
	}
	cluster, err := p.resolvePod(ctx, pr.Namespace, pr.Name)
	if err != nil {
		logger.V(2).Info("Pod not resolved to a member cluster", "err", err)
		apiresponse.WriteStatus(w, err)
		return
	}
	if s := state.placement.Scheduled; len(s) > 1 {
		names := make([]string, len(s))
		for i, c := range s {
			names[i] = c.Name
		}
		// One template, several copies: a container added to the template
		// must be in every copy, or Karmada's sync fails on the others.
		apiresponse.WriteStatus(w, apierrors.NewConflict(podsResource, pr.Name, fmt.Errorf(
			"pod %q runs in several member clusters (%s): an ephemeral container added to its template would have to run in every copy, or Karmada could no longer sync the others; "+
				"exec into a copy under its member's /clusters/<member> server URL, or debug a new pod made with `kubectl debug --copy-to` (a PropagationPolicy must place it)", pr.Namespace+"/"+pr.Name, strings.Join(names, ", "))))
		return
	}
	state.cluster = cluster
	logger = logger.WithValues("cluster", cluster)
	// The parse refused any escape: the path is the same for the member
	// and karmada-apiserver.
	path := r.URL.EscapedPath() + "?" + r.URL.RawQuery
	accept := r.Header.Get("Accept")
	if accept == "" {
		accept = "application/json"
	}

	res, err := p.sendToMember(ctx, r, cluster, path, accept, body)
	if err != nil {
		p.ephemeralUnreachable(w, r, cluster, err)
		return
	}
	if res.StatusCode/100 != 2 {
		logger.V(2).Info("Member cluster refused the ephemeral container", "code", res.StatusCode)
		relayResponse(w, res)
		return
	}
	drain(res)

	id, err := p.passthroughIdentity(ctx, r)
	if err != nil {
		apiresponse.WriteStatus(w, err)
		return
	}
	tmpl, err := retryWrite(ctx, func() (*http.Response, error) {
		return p.sendAccepting(ctx, r, id, r.Method, path, accept, body)
	})
	if err != nil {
		logger.Error(err, "Member copy has the ephemeral container, the template does not")
		apiresponse.WriteStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusBadGateway, Reason: metav1.StatusReasonInternalError,
			Details: &metav1.StatusDetails{Name: pr.Name, Kind: "pods"},
			Message: fmt.Sprintf("the ephemeral container was added to the copy of pod %q in member cluster %q, but karmada-apiserver did not add it to the template: %v; "+
				"Karmada cannot sync the pod to %q until the template has the same ephemeral containers", pr.Namespace+"/"+pr.Name, cluster, err, cluster),
		}})
		return
	}
	logger.V(4).Info("Ephemeral container added to the member copy and the template")
	relayResponse(w, tmpl)
}

// ephemeralContainer is what the audit event says of a debug container.
type ephemeralContainer struct {
	Name            string          `json:"name,omitempty"`
	Image           string          `json:"image,omitempty"`
	Command         []string        `json:"command,omitempty"`
	Args            []string        `json:"args,omitempty"`
	Target          string          `json:"targetContainerName,omitempty"`
	Stdin           bool            `json:"stdin,omitempty"`
	TTY             bool            `json:"tty,omitempty"`
	SecurityContext json.RawMessage `json:"securityContext,omitempty"`
}

// addedContainers are the ephemeral containers a write names; nil with
// unparsed set when its body is none of the forms read.
type addedContainers struct {
	containers []ephemeralContainer
	unparsed   bool
}

// debugContainers reads the ephemeral containers a pods/ephemeralcontainers
// write names: in a Pod (PUT), a merge or strategic merge patch
// ({"spec":{"ephemeralContainers":[...]}}, kubectl debug's), or a JSON
// patch's added values. The member validates the write; this is only
// what the audit says of it.
func debugContainers(body []byte) addedContainers {
	var obj struct {
		Spec struct {
			EphemeralContainers []ephemeralContainer `json:"ephemeralContainers"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &obj); err == nil {
		return addedContainers{containers: obj.Spec.EphemeralContainers}
	}
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(body, &ops); err != nil {
		return addedContainers{unparsed: true}
	}
	var out addedContainers
	for _, op := range ops {
		if (op.Op != "add" && op.Op != "replace") || !strings.HasPrefix(op.Path, "/spec/ephemeralContainers") {
			continue
		}
		var one ephemeralContainer
		var many []ephemeralContainer
		switch {
		case json.Unmarshal(op.Value, &many) == nil:
			out.containers = append(out.containers, many...)
		case json.Unmarshal(op.Value, &one) == nil:
			out.containers = append(out.containers, one)
		default:
			out.unparsed = true
		}
	}
	return out
}

// audit is the annotation's value.
func (a addedContainers) audit() string {
	if a.unparsed && len(a.containers) == 0 {
		return "unparsed"
	}
	b, _ := json.Marshal(a.containers)
	return string(b)
}

// tty reports whether a container added has a terminal (recording mode
// tty records those).
func (a addedContainers) tty() bool {
	for _, c := range a.containers {
		if c.TTY {
			return true
		}
	}
	return false
}

// retryWrite sends until an answer is 2xx, up to ephemeralWriteAttempts
// times while it fails for a passing reason (no answer, 5xx, 409, 429).
func retryWrite(ctx context.Context, send func() (*http.Response, error)) (*http.Response, error) {
	var last error
	for attempt := range ephemeralWriteAttempts {
		if attempt > 0 {
			t := time.NewTimer(time.Duration(attempt) * 200 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, errors.Join(last, ctx.Err())
			case <-t.C:
			}
		}
		res, err := send()
		if err != nil {
			last = err
			continue
		}
		if res.StatusCode/100 == 2 {
			return res, nil
		}
		last = fmt.Errorf("%d: %s", res.StatusCode, responseMessage(res))
		if res.StatusCode < 500 && res.StatusCode != http.StatusConflict && res.StatusCode != http.StatusTooManyRequests {
			return nil, last // judged, not failed: trying again gets the same answer
		}
	}
	return nil, last
}

// callerMay asks karmada-apiserver, as the caller (a SelfSubjectAccessReview
// with r's credentials and identity headers), whether they may do rr. A
// refusal or a failed review is answered and reported false.
func (p *Proxy) callerMay(w http.ResponseWriter, r *http.Request, rr identity.ResourceRequest) bool {
	ctx := r.Context()
	review := authorizationv1.SelfSubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"},
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: rr.Namespace, Verb: rr.Verb, Group: rr.Group, Resource: rr.Resource, Subresource: rr.Subresource, Name: rr.Name,
		}},
	}
	body, err := json.Marshal(review)
	if err != nil {
		apiresponse.WriteStatus(w, apierrors.NewInternalError(err))
		return false
	}
	id, err := p.passthroughIdentity(ctx, r)
	if err != nil {
		apiresponse.WriteStatus(w, err)
		return false
	}
	edit := id.editHeader
	id.editHeader = func(h http.Header) {
		if edit != nil {
			edit(h)
		}
		h.Set("Content-Type", "application/json")
	}
	done := stateFrom(ctx).phases.TimeCheck("authorization")
	res, err := p.sendAccepting(ctx, r, id, http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json", body)
	done()
	if err != nil {
		p.handleError(w, r, fmt.Errorf("checking the caller's access to %s/%s of %s/%s: %w", rr.Resource, rr.Subresource, rr.Namespace, rr.Name, err))
		return false
	}
	if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusOK {
		relayResponse(w, res)
		return false
	}
	defer drain(res)
	var answer authorizationv1.SelfSubjectAccessReview
	if err := json.NewDecoder(io.LimitReader(res.Body, maxCheckBodyBytes)).Decode(&answer); err != nil {
		p.handleError(w, r, fmt.Errorf("reading karmada-apiserver's SelfSubjectAccessReview: %w", err))
		return false
	}
	if !answer.Status.Allowed {
		why := answer.Status.Reason
		if why == "" {
			why = "no RBAC rule allows it"
		}
		apiresponse.WriteStatus(w, apierrors.NewForbidden(schema.GroupResource{Resource: rr.Resource + "/" + rr.Subresource}, rr.Name,
			fmt.Errorf("the caller may not %s it in karmada-apiserver: %s", rr.Verb, why)))
		return false
	}
	return true
}

// sendToMember sends r's method with body to pathAndQuery below cluster's
// kube-apiserver: through its cluster proxy with the caller's headers
// (passthrough) or the gateway's identity (authorize mode), or directly in
// direct member access, acting as memberCaller says.
func (p *Proxy) sendToMember(ctx context.Context, r *http.Request, cluster, pathAndQuery, accept string, body []byte) (*http.Response, error) {
	if p.members != nil {
		m, edit, err := p.directMember(ctx, r, cluster)
		if err != nil {
			return nil, err
		}
		return p.sendMemberAs(ctx, r, m, edit, r.Method, pathAndQuery, accept, body)
	}
	as := upstreamIdentity{}
	if p.authMode == AuthAuthorize {
		as = upstreamIdentity{gateway: true, editHeader: identity.StripHeaders}
	}
	return p.sendAccepting(ctx, r, as, r.Method, karmada.ClusterProxyPath(cluster, pathAndQuery), accept, body)
}

// ephemeralUnreachable answers a member that could not be asked: an
// APIStatus (authorize mode's refusal of clusters/proxy in direct mode, a
// Cluster without its impersonator Secret) as it is, else 503 naming the
// member.
func (p *Proxy) ephemeralUnreachable(w http.ResponseWriter, r *http.Request, cluster string, err error) {
	if errors.As(err, new(apierrors.APIStatus)) {
		apiresponse.WriteStatus(w, err)
		return
	}
	p.handleError(w, r, fmt.Errorf("member cluster %q: %w", cluster, err))
}

// maxEphemeralAnswer bounds what is read of an answer to relay: a Pod.
const maxEphemeralAnswer = 8 << 20

// relayResponse writes res to w as it came (apiresponse.Relay).
func relayResponse(w http.ResponseWriter, res *http.Response) {
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxEphemeralAnswer))
	if err != nil {
		apiresponse.WriteStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("reading the answer: %v", err)))
		return
	}
	apiresponse.Relay(w, res, body)
}

// drain reads and closes a response whose body is not needed, so its
// connection is kept.
func drain(res *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxCheckBodyBytes))
	_ = res.Body.Close()
}

// responseMessage is the Status message of res's body, protobuf or JSON,
// or its text (apiresponse.Message); the body is drained.
func responseMessage(res *http.Response) string {
	defer drain(res)
	b, _ := io.ReadAll(io.LimitReader(res.Body, maxCheckBodyBytes))
	return apiresponse.Message(b)
}
