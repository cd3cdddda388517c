package apiresponse

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StatusFor returns err as the Status a client sees: APIStatus errors as they
// are, anything else as 500 InternalError.
func StatusFor(err error) metav1.Status {
	var st metav1.Status
	var apiStatus apierrors.APIStatus
	if errors.As(err, &apiStatus) {
		st = apiStatus.Status()
	} else {
		st = apierrors.NewInternalError(err).ErrStatus
	}
	st.Kind = "Status"
	st.APIVersion = "v1"
	if st.Status == "" {
		st.Status = metav1.StatusFailure
	}
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	return st
}

// WriteStatus writes err as a metav1.Status JSON body with its HTTP code, so
// kubectl and client-go report it as they report apiserver errors.
func WriteStatus(w http.ResponseWriter, err error) {
	st := StatusFor(err)
	body, mErr := json.Marshal(st)
	if mErr != nil {
		// A Status always marshals; keep the code right if it ever does not.
		body = []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":` + strconv.Itoa(int(st.Code)) + `}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		// As kube-apiserver does: client-go waits for the header, not the
		// Status detail, before it retries a 429 or 5xx.
		h.Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(body)
}

// Relay writes an upstream answer the gateway does not merge into
// as it came.
func Relay(w http.ResponseWriter, res *http.Response, body []byte) {
	CopyHeader(w.Header(), res.Header)
	w.Header().Del("Content-Length")
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(body)
}

// CopyHeader copies src's end-to-end headers into dst: hop-by-hop ones and
// Content-Length, which the writer sets for the body it writes, stay out.
func CopyHeader(dst, src http.Header) {
	for k, v := range src {
		switch http.CanonicalHeaderKey(k) {
		case "Connection", "Keep-Alive", "Transfer-Encoding", "Trailer", "Upgrade", "Content-Length":
			continue
		}
		dst[k] = append([]string(nil), v...)
	}
}
