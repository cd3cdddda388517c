package nodeagent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

const (
	// kubelet's defaults (streamingConnectionIdleTimeout, and the CRI
	// streaming server's stream creation timeout).
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout

	// internalHost names the in-memory listener translated requests go to.
	internalHost = "nodeagent.internal"
)

// server is the kubelet API: HTTPS for the apiserver, plus the in-memory
// plain-HTTP twin that WebSocket translation targets.
type server struct {
	public, internal *http.Server
	publicConns      *trackingListener
	internalConns    *trackingListener
	done             sync.WaitGroup
}

func (a *Agent) startServer(ctx context.Context) (*server, error) {
	logger := klog.FromContext(ctx)
	tlsConfig := &tls.Config{
		Certificates: []tls.Certificate{a.opts.ServingCert},
		// SPDY and WebSocket upgrades need HTTP/1.1.
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	}
	if a.opts.ClientCAs != nil {
		tlsConfig.ClientCAs = a.opts.ClientCAs
		tlsConfig.ClientAuth = tls.RequireAndVerifyClientCert
	}

	pipe := newPipeListener()
	internalTransport := &http.Transport{DialContext: pipe.DialContext, ForceAttemptHTTP2: false}
	s := &server{
		publicConns:   newTrackingListener(a.opts.Listener),
		internalConns: newTrackingListener(pipe),
	}
	errLog := log.New(klogWriter{logger}, "", 0)
	s.public = &http.Server{
		Handler:           a.kubeletAPI(internalTransport),
		TLSConfig:         tlsConfig,
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          errLog,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	s.internal = &http.Server{
		Handler:           a.kubeletAPI(nil),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          errLog,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	for _, run := range []func() error{
		func() error { return s.public.Serve(tls.NewListener(s.publicConns, tlsConfig)) },
		func() error { return s.internal.Serve(s.internalConns) },
	} {
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			if err := run(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Kubelet API server failed")
			}
		}()
	}
	return s, nil
}

// close stops both servers and cuts the upgraded (hijacked) connections,
// which http.Server no longer tracks.
func (s *server) close() {
	_ = s.public.Close()
	_ = s.internal.Close()
	s.publicConns.closeAll()
	s.internalConns.closeAll()
	s.done.Wait()
}

type kubeletAPI struct {
	a *Agent
	// translate is the transport to the in-memory twin; nil on the twin
	// itself, which only ever sees SPDY.
	translate http.RoundTripper
}

func (a *Agent) kubeletAPI(translate http.RoundTripper) http.Handler {
	h := &kubeletAPI{a: a, translate: translate}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		mux.HandleFunc(m+" /exec/{ns}/{pod}/{container}", h.exec)
		mux.HandleFunc(m+" /exec/{ns}/{pod}/{uid}/{container}", h.exec)
		mux.HandleFunc(m+" /attach/{ns}/{pod}/{container}", h.attach)
		mux.HandleFunc(m+" /attach/{ns}/{pod}/{uid}/{container}", h.attach)
		mux.HandleFunc(m+" /portForward/{ns}/{pod}", h.portForward)
		mux.HandleFunc(m+" /portForward/{ns}/{pod}/{uid}", h.portForward)
	}
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", h.containerLogs)
	return mux
}

// pod finds the pod of the request among those bound to this node. Errors
// are written (plain text, as kubelet answers).
func (h *kubeletAPI) pod(w http.ResponseWriter, r *http.Request) (*v1.Pod, string, string, bool) {
	ns, name, uid := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid")
	pod, err := h.a.podLister.Pods(ns).Get(name)
	if err != nil || pod.Spec.NodeName != h.a.nodeName || (uid != "" && uid != string(pod.UID)) {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return nil, "", "", false
	}
	return pod, ns + "/" + name, string(pod.UID), true
}

func hasContainer(pod *v1.Pod, name string) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

// streamTarget checks what exec and attach need before upgrading, so a
// client gets a plain HTTP error it can print instead of a dead stream.
func (h *kubeletAPI) streamTarget(w http.ResponseWriter, r *http.Request) (*remotecommand.Options, string, string, bool) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, "", "", false
	}
	pod, key, uid, ok := h.pod(w, r)
	if !ok {
		return nil, "", "", false
	}
	container := r.PathValue("container")
	if !hasContainer(pod, container) {
		http.Error(w, fmt.Sprintf("container %q not found in pod %q", container, pod.Name), http.StatusNotFound)
		return nil, "", "", false
	}
	if _, _, _, err := h.a.container(key, uid, container); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, "", "", false
	}
	return opts, key, uid, true
}

func (h *kubeletAPI) exec(w http.ResponseWriter, r *http.Request) {
	opts, key, uid, ok := h.streamTarget(w, r)
	if !ok {
		return
	}
	if h.translateV5(w, r, opts) {
		return
	}
	remotecommand.ServeExec(w, r, h.a, key, uid, r.PathValue("container"), r.URL.Query()["command"], opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (h *kubeletAPI) attach(w http.ResponseWriter, r *http.Request) {
	opts, key, uid, ok := h.streamTarget(w, r)
	if !ok {
		return
	}
	if h.translateV5(w, r, opts) {
		return
	}
	remotecommand.ServeAttach(w, r, h.a, key, uid, r.PathValue("container"), opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// translateV5 serves WebSocket v5.channel.k8s.io (which the CRI streaming
// library does not speak) the way kubelet does: the apiserver's stream
// translator turns it into SPDY against the in-memory twin.
func (h *kubeletAPI) translateV5(w http.ResponseWriter, r *http.Request, opts *remotecommand.Options) bool {
	if h.translate == nil || !wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		return false
	}
	translator.NewStreamTranslatorHandler(internalURL(r), h.translate, 0, translator.Options{
		Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, Tty: opts.TTY,
	}).ServeHTTP(w, r)
	return true
}

func (h *kubeletAPI) portForward(w http.ResponseWriter, r *http.Request) {
	_, key, uid, ok := h.pod(w, r)
	if !ok {
		return
	}
	if h.translate != nil && wsstream.IsWebSocketRequestWithTunnelingProtocol(r) {
		// SPDY tunnelled in WebSocket (kubectl port-forward): unwrap it as
		// kubelet does and proxy the SPDY upgrade to the twin.
		upgrade := utilproxy.NewUpgradeAwareHandler(internalURL(r), h.translate, false, true, proxyResponder{})
		translator.NewTunnelingHandler(upgrade).ServeHTTP(w, r)
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, h.a, key, uid, opts, streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

func (h *kubeletAPI) containerLogs(w http.ResponseWriter, r *http.Request) {
	pod, key, uid, ok := h.pod(w, r)
	if !ok {
		return
	}
	container := r.PathValue("container")
	if !hasContainer(pod, container) {
		http.Error(w, fmt.Sprintf("container %q not found in pod %q", container, pod.Name), http.StatusNotFound)
		return
	}
	opts, err := parseLogOptions(r.URL.Query(), time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	path, live, err := h.a.logSource(pod, key, uid, container, opts.previous)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-h.a.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := serveLog(ctx, w, func() { _ = rc.Flush() }, path, live, opts); err != nil {
		klog.FromContext(r.Context()).V(2).Info("Serving container log ended", "pod", key, "container", container, "err", err.Error())
	}
}

// logSource picks the log file (and, for a running instance, its live
// writer) a /containerLogs request reads.
func (a *Agent) logSource(pod *v1.Pod, key, uid, container string, previous bool) (string, *logWriter, error) {
	var n int32
	var live *logWriter
	found := false
	if rt := a.runtimeFor(key, uid); rt != nil {
		n, live, found = rt.logInstance(container)
	} else {
		n, found = a.lastLogInstance(pod.Namespace, pod.Name, container)
	}
	if previous {
		if !found || n == 0 {
			return "", nil, fmt.Errorf("previous terminated container %q in pod %q not found", container, pod.Name)
		}
		n, live = n-1, nil
	}
	path := a.logPath(pod.Namespace, pod.Name, container, n)
	if _, err := os.Stat(path); !found || err != nil {
		return "", nil, fmt.Errorf("container %q in pod %q is waiting to start: ContainerCreating", container, pod.Name)
	}
	return path, live, nil
}

func internalURL(r *http.Request) *url.URL {
	return &url.URL{Scheme: "http", Host: internalHost, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
}

type proxyResponder struct{}

func (proxyResponder) Error(w http.ResponseWriter, req *http.Request, err error) {
	klog.FromContext(req.Context()).Error(err, "Proxying port-forward to the streaming twin")
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// klogWriter sends net/http's own error log (TLS handshake failures and
// the like) to klog.
type klogWriter struct{ logger klog.Logger }

func (k klogWriter) Write(p []byte) (int, error) {
	k.logger.V(2).Info("HTTP server", "msg", string(p))
	return len(p), nil
}

// trackingListener remembers accepted connections so shutdown can close
// the upgraded ones.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func newTrackingListener(l net.Listener) *trackingListener {
	return &trackingListener{Listener: l, conns: map[*trackedConn]struct{}{}}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.conns[tc] = struct{}{}
	return tc, nil
}

func (l *trackingListener) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = map[*trackedConn]struct{}{}
	l.mu.Unlock()
	_ = l.Listener.Close()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// pipeListener is an in-memory listener: the translation hop to the
// streaming twin never leaves the process.
type pipeListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-ctx.Done():
	case <-l.closed:
	}
	_ = server.Close()
	_ = client.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, net.ErrClosed
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return internalHost }
