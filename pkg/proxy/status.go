package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusFor returns err as the Status a client sees: APIStatus errors as they
// are, anything else as 500 InternalError.
func statusFor(err error) metav1.Status {
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

// writeStatus writes err as a metav1.Status JSON body with its HTTP code, so
// kubectl and client-go report it as they report apiserver errors.
func writeStatus(w http.ResponseWriter, err error) {
	st := statusFor(err)
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
