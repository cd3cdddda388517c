package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxReplayableBody is the largest request body Replayable keeps in memory:
// a Pod or a Job with a long script fits, and a few hundred concurrent
// requests cost tens of MiB at most.
const MaxReplayableBody = 256 << 10

// Replayable lets the transport send r again on a new connection when the
// one it went out on closes before karmada-apiserver took the request: an
// HTTP/2 GOAWAY naming an earlier last stream (kube-apiserver sends them on
// purpose with --goaway-chance, and when it closes a connection), or a
// reused HTTP/1.1 connection found closed before anything was written. Go's
// transports retry only what the server provably did not process, and only
// when they can get the body again (Request.GetBody), which the request a
// server receives never has: without it a pod create that met a GOAWAY
// failed with "cannot retry ... after Request.Body was written".
//
// So a body of known length up to MaxReplayableBody is read whole first,
// within d: while streamed, a trickled body was bounded by
// karmada-apiserver's own request timeout, and read here first it must be
// bounded too (w's read deadline; a 408 Status past it, a 400 for a body
// that ends short). A larger or chunked body streams as before, and fails
// if its connection goes.
func Replayable(w http.ResponseWriter, r *http.Request, d time.Duration) error {
	if r.Body == nil || r.Body == http.NoBody || r.GetBody != nil ||
		r.ContentLength <= 0 || r.ContentLength > MaxReplayableBody {
		return nil
	}
	body, err := ReadBodyWithin(w, r, r.ContentLength, d)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return nil
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// ReadBodyWithin reads r's body whole, at most limit bytes (413 past it),
// within d (w's read deadline; a 408 Status past it, a 400 for a body that
// ends short or fails): a client trickling its body must not hold a
// request forever.
func ReadBodyWithin(w http.ResponseWriter, r *http.Request, limit int64, d time.Duration) ([]byte, error) {
	rc := http.NewResponseController(w)
	deadline := d > 0 && rc.SetReadDeadline(time.Now().Add(d)) == nil
	body, err := readBody(r, limit)
	if err != nil {
		// The rest of the body may still come: the connection is not
		// reused, and the deadline stays past so that the server does not
		// wait for that rest before it answers.
		if r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
		if isTimeout(err) {
			return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusRequestTimeout, Reason: metav1.StatusReasonTimeout,
				Message: fmt.Sprintf("the request body did not arrive within %s", d),
			}}
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err))
	}
	if int64(len(body)) > limit {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the request body is limited to %d bytes", limit))
	}
	if deadline {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return body, nil
}

// readBody reads up to limit+1 bytes of r's body: of a known length into
// a slice of that size (net/http ends such a body there, short of it with
// io.ErrUnexpectedEOF), else as they come.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength >= 0 && r.ContentLength <= limit {
		body := make([]byte, r.ContentLength)
		_, err := io.ReadFull(r.Body, body)
		return body, err
	}
	return io.ReadAll(io.LimitReader(r.Body, limit+1))
}
