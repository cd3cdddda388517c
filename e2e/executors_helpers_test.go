package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	corev1 "k8s.io/api/core/v1"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// The replays below talk to the gateway the way executors that do not use
// client-go do: a raw WebSocket whose binary messages start with a channel
// byte (0 stdin, 1 stdout, 2 stderr, 3 error/status, 4 resize; for
// port-forward 2n data and 2n+1 error of the n-th port).
const (
	chStdin  byte = 0
	chStdout byte = 1
	chStderr byte = 2
	chError  byte = 3
	chResize byte = 4
	// chClose starts a v5.channel.k8s.io close message: [255, channel].
	chClose byte = 255
)

// wsSession is one raw WebSocket stream session through the gateway. A
// goroutine reads every message and appends its payload to its channel's
// buffer until the server closes the socket.
type wsSession struct {
	conn     *websocket.Conn
	protocol string // the subprotocol the server chose

	writeMu sync.Mutex

	mu    sync.Mutex
	chans map[byte]*bytes.Buffer
	pongs []string

	done    chan struct{}
	readErr error // why reading ended (a close frame, EOF, ...)
}

// dialGatewayWS opens a WebSocket GET to path?rawQuery on the gateway as
// user with a bearer token, offering protocols in order. rawQuery is sent
// byte for byte, as the executor builds it.
func dialGatewayWS(t *testing.T, user, path, rawQuery string, protocols []string) *wsSession {
	t.Helper()
	s, resp, err := tryDialGatewayWS(t, user, path, rawQuery, protocols)
	if err != nil {
		t.Fatalf("WebSocket GET %s?%s offering %v: %v (%s)", path, rawQuery, protocols, err, resp)
	}
	return s
}

// refusedUpgrade is the HTTP answer to a WebSocket handshake that failed.
type refusedUpgrade struct {
	code int
	body []byte
}

func (r refusedUpgrade) String() string {
	if r.code == 0 {
		return "no HTTP response"
	}
	return fmt.Sprintf("HTTP %d: %s", r.code, r.body)
}

// tryDialGatewayWS is dialGatewayWS returning the failure, with a
// description of the HTTP answer when there was one.
func tryDialGatewayWS(t *testing.T, user, path, rawQuery string, protocols []string) (*wsSession, refusedUpgrade, error) {
	t.Helper()
	cfg, err := testEnv.GatewayConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	return dialWS(t, cfg, path, rawQuery, protocols)
}

// dialWS is tryDialGatewayWS against the server of cfg (whose host may
// carry a path prefix, as the cluster proxy's does).
func dialWS(t *testing.T, cfg *rest.Config, path, rawQuery string, protocols []string) (*wsSession, refusedUpgrade, error) {
	t.Helper()
	conn, resp, err := dialRawWS(t, cfg, path, rawQuery, protocols)
	if err != nil {
		return nil, refusal(resp), err
	}
	s := &wsSession{
		conn:     conn,
		protocol: conn.Subprotocol(),
		chans:    map[byte]*bytes.Buffer{},
		done:     make(chan struct{}),
	}
	conn.SetPongHandler(func(data string) error {
		s.mu.Lock()
		s.pongs = append(s.pongs, data)
		s.mu.Unlock()
		return nil
	})
	go s.read()
	t.Cleanup(func() { s.close() })
	return s, refusedUpgrade{}, nil
}

// dialRawWS opens a WebSocket GET to path?rawQuery on the server of cfg
// with cfg's bearer token, offering protocols in order, and returns the
// connection with the handshake's answer (also when the server refused).
func dialRawWS(t *testing.T, cfg *rest.Config, path, rawQuery string, protocols []string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dialer := websocket.Dialer{
		// One message, one frame, as okhttp and client-node send them:
		// gorilla fragments a message larger than its write buffer, and the
		// kubelet side's golang.org/x/net/websocket reads every frame as a
		// message of its own (so a continuation frame's first payload byte
		// would be taken for a channel). Keep sendAll chunks below this.
		WriteBufferSize:  maxWSMessage + 64,
		TLSClientConfig:  tlsCfg,
		Subprotocols:     protocols,
		HandshakeTimeout: 30 * time.Second,
	}
	u := "wss://" + strings.TrimPrefix(cfg.Host, "https://") + path + "?" + rawQuery
	header := http.Header{}
	if cfg.BearerToken != "" {
		header.Set("Authorization", "Bearer "+cfg.BearerToken)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return dialer.DialContext(ctx, u, header)
}

// refusal describes resp, the answer to a failed WebSocket handshake (nil
// when there was none).
func refusal(resp *http.Response) refusedUpgrade {
	var r refusedUpgrade
	if resp != nil {
		r.code = resp.StatusCode
		r.body, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
	}
	return r
}

func (s *wsSession) read() {
	defer close(s.done)
	for {
		typ, data, err := s.conn.ReadMessage()
		if err != nil {
			s.mu.Lock()
			s.readErr = err
			s.mu.Unlock()
			return
		}
		if typ != websocket.BinaryMessage || len(data) == 0 {
			continue
		}
		s.mu.Lock()
		b := s.chans[data[0]]
		if b == nil {
			b = &bytes.Buffer{}
			s.chans[data[0]] = b
		}
		b.Write(data[1:])
		s.mu.Unlock()
	}
}

// send writes one binary message: the channel byte, then p.
func (s *wsSession) send(ch byte, p []byte) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.conn.WriteMessage(websocket.BinaryMessage, append([]byte{ch}, p...))
}

// maxWSMessage bounds the messages sendAll writes (see the dialer).
const maxWSMessage = 64 << 10

// sendAll writes data on ch in messages of at most chunk bytes.
func (s *wsSession) sendAll(ch byte, data []byte, chunk int) error {
	chunk = min(chunk, maxWSMessage-1)
	for len(data) > 0 {
		n := min(chunk, len(data))
		if err := s.send(ch, data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// resize sends a terminal size on the resize channel, as JSON the way
// every executor does.
func (s *wsSession) resize(width, height int) error {
	return s.send(chResize, fmt.Appendf(nil, `{"Width":%d,"Height":%d}`, width, height))
}

func (s *wsSession) ping(data string) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.conn.WriteControl(websocket.PingMessage, []byte(data), time.Now().Add(10*time.Second))
}

func (s *wsSession) pong(data string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pongs {
		if p == data {
			return true
		}
	}
	return false
}

// bytes returns everything received on ch so far.
func (s *wsSession) bytes(ch byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.chans[ch]; b != nil {
		return bytes.Clone(b.Bytes())
	}
	return nil
}

func (s *wsSession) text(ch byte) string { return string(s.bytes(ch)) }

// waitFor polls cond until it holds, the session ends, or timeout.
func (s *wsSession) waitFor(ctx context.Context, what string, timeout time.Duration, cond func() bool) error {
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if cond() {
			return true, nil
		}
		select {
		case <-s.done:
			if cond() {
				return true, nil
			}
			return false, fmt.Errorf("the socket closed (%v)", s.err())
		default:
			return false, nil
		}
	})
	if err != nil {
		return fmt.Errorf("wait for %s: %w; stdout %q, stderr %q, error channel %q",
			what, err, tail(s.text(chStdout), 300), tail(s.text(chStderr), 300), s.text(chError))
	}
	return nil
}

// waitText waits until channel ch has received a text containing want.
func (s *wsSession) waitText(ctx context.Context, ch byte, want string, timeout time.Duration) error {
	return s.waitFor(ctx, fmt.Sprintf("%q on channel %d", want, ch), timeout, func() bool {
		return strings.Contains(s.text(ch), want)
	})
}

// waitClosed waits until the server has closed the socket.
func (s *wsSession) waitClosed(timeout time.Duration) error {
	select {
	case <-s.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("the server did not close the socket within %s; stdout %q, stderr %q, error channel %q",
			timeout, tail(s.text(chStdout), 300), tail(s.text(chStderr), 300), s.text(chError))
	}
}

func (s *wsSession) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readErr
}

func (s *wsSession) close() { _ = s.conn.Close() }

// status decodes the v4/v5 error channel: the metav1.Status of the exec.
func (s *wsSession) status() (*metav1.Status, error) {
	raw := s.bytes(chError)
	var st metav1.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("error channel %q is not a Status: %w", raw, err)
	}
	return &st, nil
}

// checkExitStatus checks a v4/v5 exec status: Success for 0, else
// NonZeroExitCode with the code as the ExitCode cause.
func checkExitStatus(st *metav1.Status, want int) error {
	if want == 0 {
		if st.Status != metav1.StatusSuccess {
			return fmt.Errorf("status %+v, want Success", st)
		}
		return nil
	}
	if st.Status != metav1.StatusFailure || st.Reason != "NonZeroExitCode" || st.Details == nil ||
		len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != "ExitCode" ||
		st.Details.Causes[0].Message != strconv.Itoa(want) {
		return fmt.Errorf("status %+v, want NonZeroExitCode with ExitCode cause %d", st, want)
	}
	return nil
}

// workingDir is where container of pod runs commands: the spec's
// workingDir, else the image's, which is / for every local image.
func workingDir(pod *corev1.Pod, container string) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == container && c.WorkingDir != "" {
			return c.WorkingDir
		}
	}
	return "/"
}

// gatewayRequests reads karmada_gateway_requests_total{route, code} from
// the gateway's metrics port (0 when the series does not exist yet).
func gatewayRequests(t *testing.T, route, code string) float64 {
	t.Helper()
	return gatewayCounter(t, "karmada_gateway_requests_total", `route="`+route+`"`, `code="`+code+`"`)
}

// gatewayCounter sums the gateway's series of name whose labels include
// every one of labels (`key="value"`), 0 when there is none yet.
func gatewayCounter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(testEnv.CAPEM()) {
		t.Fatal("environment CA is not PEM")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, testEnv.GatewayMetricsURL()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("scrape gateway metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape gateway metrics: %s", resp.Status)
	}
	var total float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue lines
			}
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		total += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

// routeCounter checks that the gateway counted a request on a rewritten
// route: take one before the calls, call check after them.
type routeCounter struct {
	route, code string
	before      float64
}

func countRoute(t *testing.T, route, code string) *routeCounter {
	t.Helper()
	return &routeCounter{route: route, code: code, before: gatewayRequests(t, route, code)}
}

// check fails t unless the counter grew by at least n.
func (c *routeCounter) check(t *testing.T, n float64) {
	t.Helper()
	if after := gatewayRequests(t, c.route, c.code); after-c.before < n {
		t.Errorf("karmada_gateway_requests_total{route=%q,code=%q} went from %v to %v, want at least %v more: the gateway did not route these calls as %s",
			c.route, c.code, c.before, after, n, c.route)
	}
}
