package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
)

// Karmada's cluster proxy relays the member apiserver's answers, its errors
// included, but answers its own failure to reach the member (spec.proxyURL's
// proxy down, a proxy refusing the CONNECT, the member apiserver refusing
// connections, a TLS failure) with the bare Go error as a 500 Status:
// "dial tcp 198.18.2.2:37101: connect: connection refused", naming no
// cluster, while the Cluster stays Ready (a Pull member's agent probes its
// apiserver from inside). ReportMemberUnreachable turns that answer into a
// 503 naming the cluster proxy and the member, the original message kept,
// as the gateway names the cluster proxy when it cannot reach it itself.

// maxProxyErrorBytes bounds what is read of an error answer to tell whose it
// is; a Status is far smaller, and a longer body is relayed untouched.
const maxProxyErrorBytes = 64 << 10

// maxReportedMessage bounds the upstream message quoted in the new Status.
const maxReportedMessage = 1024

// dialErrorPrefixes start the messages of the Go errors Karmada's cluster
// proxy turns into a Status when it cannot reach a member (its ReverseProxy's
// transport and its upgrade dialer, pkg/util/proxy). A member apiserver's
// own errors about its kubelets or pods are worded by kube-apiserver
// ("error dialing backend: ...", "Get \"https://...\": ...", "error trying
// to reach service: ...") and do not start so.
var dialErrorPrefixes = []string{
	"dial ",               // *net.OpError: "dial tcp 198.18.2.2:37101: connect: connection refused"
	"proxyconnect ",       // net/http dialing spec.proxyURL: "proxyconnect tcp: dial tcp ..."
	"CONNECT request to ", // Karmada's upgrade dialer: the proxy refused the CONNECT
	"socks connect ",      // golang.org/x/net/proxy, a socks5 spec.proxyURL
	"tls: ",               // the member's certificate or handshake
	"x509: ",
	"remote error: ",
	"net/http: ", // "net/http: TLS handshake timeout"
	"read tcp ",
	"write tcp ",
	"EOF",
	"unexpected EOF",
}

// memberUnreachable reports whether an answer of code with body (of
// contentType), to a request sent through a cluster proxy, is the
// cluster proxy's own failure to reach the member, or a failure in front
// of it (aggregation: the answer never came from the cluster proxy), and
// the message it carried. It is when the answer is
//   - a Status of reason Unknown (what an apiserver makes of a Go error;
//     kube-apiserver's own errors carry a reason) whose message is a dial or
//     transport error as dialErrorPrefixes has them, with code 500, 502 or
//     503; or
//   - on a pod subresource route (exec, attach, log, portforward), a 502 or
//     503 that is no Status at all (aggregation): the member's
//     kube-apiserver and Karmada's cluster proxy answer with a Status, so
//     text is karmada-apiserver's aggregation layer's (kube-aggregator's
//     "service unavailable", or its "error dialing backend" when it cannot
//     reach karmada-aggregated-apiserver), and says nothing of the member.
//
// Everything else, the member's 403, 404, 500 "error dialing backend"
// included, and whatever a pod answers on pods/proxy, is the member's and
// relayed as it came.
func memberUnreachable(podSubresource bool, code int, contentType string, body []byte) (msg string, aggregation, ok bool) {
	switch code {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable:
	default:
		return "", false, false
	}
	if st, ok := decodeStatus(contentType, body); ok {
		if st.Reason != metav1.StatusReasonUnknown || !hasAnyPrefix(st.Message, dialErrorPrefixes) {
			return "", false, false
		}
		return st.Message, false, true
	}
	if !podSubresource || code == http.StatusInternalServerError {
		return "", false, false
	}
	msg = strings.TrimSpace(string(body))
	if msg == "" {
		msg = http.StatusText(code)
	}
	return fmt.Sprintf("HTTP %d: %s", code, msg), true, true
}

// decodeStatus decodes body as a Status in JSON or protobuf, as the client's
// Accept made Karmada answer.
func decodeStatus(contentType string, body []byte) (*metav1.Status, bool) {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, false
	}
	switch mediaType {
	case "application/json":
		var st metav1.Status
		if json.Unmarshal(body, &st) != nil || st.Kind != "Status" {
			return nil, false
		}
		return &st, true
	case "application/vnd.kubernetes.protobuf":
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, &metav1.Status{})
		st, ok := obj.(*metav1.Status)
		return st, err == nil && ok
	}
	return nil, false
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// ReportMemberUnreachable replaces res, an error answer to a request sent
// through the cluster proxy of cluster, by a 503 ServiceUnavailable Status
// naming the cluster proxy and the member when memberUnreachable says it is
// the cluster proxy's own failure. podSubresource: the request was a pod's
// exec, attach, log or portforward. Other answers are relayed unchanged
// (their body as read so far, then the rest).
func ReportMemberUnreachable(res *http.Response, cluster string, podSubresource bool) error {
	if cluster == "" || res.StatusCode < 500 || res.Header.Get("Content-Encoding") != "" {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxProxyErrorBytes+1))
	if err != nil || len(body) > maxProxyErrorBytes {
		// Too long for a Status, or cut: relay what came, as it came.
		res.Body = readCloser{io.MultiReader(bytes.NewReader(body), res.Body), res.Body}
		return nil
	}
	res.Body.Close()
	msg, aggregation, ok := memberUnreachable(podSubresource, res.StatusCode, res.Header.Get("Content-Type"), body)
	if !ok {
		res.Body = io.NopCloser(bytes.NewReader(body))
		return nil
	}
	if len(msg) > maxReportedMessage {
		msg = msg[:maxReportedMessage] + "..."
	}
	logger := klog.FromContext(res.Request.Context())
	// Each message says who answered, never a guess at whose fault it was.
	text := fmt.Sprintf("%s could not reach member cluster %q: %s", ClusterProxyName(cluster), cluster, msg)
	if aggregation {
		logger.Info("karmada-apiserver answered before the cluster proxy did", "cluster", cluster, "code", res.StatusCode, "err", msg)
		text = fmt.Sprintf("member cluster %q was not reached: karmada-apiserver answered in front of %s, not a Status of the cluster proxy or the member: %s",
			cluster, ClusterProxyName(cluster), msg)
	} else {
		logger.Info("Cluster proxy could not reach the member", "cluster", cluster, "code", res.StatusCode, "err", msg)
	}
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     http.StatusServiceUnavailable,
		Reason:   metav1.StatusReasonServiceUnavailable,
		Message:  text,
	}
	out, err := json.Marshal(st)
	if err != nil {
		return err
	}
	res.StatusCode, res.Status = http.StatusServiceUnavailable, "503 Service Unavailable"
	res.Header.Set("Content-Type", "application/json")
	res.Header.Set("Content-Length", strconv.Itoa(len(out)))
	res.ContentLength = int64(len(out))
	res.Body = io.NopCloser(bytes.NewReader(out))
	return nil
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}
