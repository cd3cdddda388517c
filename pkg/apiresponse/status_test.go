package apiresponse

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestStatusFor(t *testing.T) {
	st := StatusFor(errors.New("boom"))
	if st.Code != 500 || st.Reason != metav1.StatusReasonInternalError || st.Kind != "Status" || st.APIVersion != "v1" {
		t.Errorf("plain error: %+v", st)
	}
	wrapped := StatusFor(errors.Join(errors.New("ctx"), apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "x", errors.New("no"))))
	if wrapped.Code != 403 || wrapped.Reason != metav1.StatusReasonForbidden {
		t.Errorf("wrapped APIStatus: %+v", wrapped)
	}
}
