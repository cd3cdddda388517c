package standin

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

const (
	apiServiceName     = "v1alpha1.cluster.karmada.io"
	aggregatedService  = "karmada-aggregated-apiserver"
	availablePollEvery = 200 * time.Millisecond
)

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// register creates the namespaces Karmada keeps (karmada-system,
// karmada-cluster, an execution namespace per member) and registers the
// aggregated API the way Karmada's installers do: an APIService pointing at
// an ExternalName Service, here resolving to localhost.
func (s *StandIn) register(ctx context.Context) error {
	namespaces := []string{karmadaSystemNamespace, karmadaClusterNamespace}
	for _, m := range s.opts.Members {
		namespaces = append(namespaces, executionNamespace(m.Name))
	}
	for _, ns := range namespaces {
		if err := ensureNamespace(ctx, s.kube, ns); err != nil {
			return fmt.Errorf("standin: %w", err)
		}
	}
	if err := s.ensureService(ctx); err != nil {
		return err
	}
	return s.ensureAPIService(ctx)
}

func (s *StandIn) ensureService(ctx context.Context) error {
	want := corev1.ServiceSpec{
		Type:         corev1.ServiceTypeExternalName,
		ExternalName: "localhost",
		Ports:        []corev1.ServicePort{{Port: int32(s.servingPort)}},
	}
	services := s.kube.CoreV1().Services(karmadaSystemNamespace)
	existing, err := services.Get(ctx, aggregatedService, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: aggregatedService, Namespace: karmadaSystemNamespace}, Spec: want}
		if _, err := services.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("standin: create service: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("standin: get service: %w", err)
	}
	existing.Spec.Type, existing.Spec.ExternalName, existing.Spec.Ports = want.Type, want.ExternalName, want.Ports
	if _, err := services.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("standin: update service: %w", err)
	}
	return nil
}

func (s *StandIn) ensureAPIService(ctx context.Context) error {
	spec := map[string]any{
		"group":                clusterGroup,
		"version":              clusterVersion,
		"groupPriorityMinimum": int64(2000),
		"versionPriority":      int64(10),
		"caBundle":             base64.StdEncoding.EncodeToString(s.opts.ServingCA),
		"service": map[string]any{
			"name":      aggregatedService,
			"namespace": karmadaSystemNamespace,
			"port":      int64(s.servingPort),
		},
	}
	client := s.dyn.Resource(apiServiceGVR)
	existing, err := client.Get(ctx, apiServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1",
			"kind":       "APIService",
			"metadata": map[string]any{
				"name":   apiServiceName,
				"labels": map[string]any{"app": aggregatedService, "apiserver": "true"},
			},
			"spec": spec,
		}}
		if _, err := client.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("standin: create APIService: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("standin: get APIService: %w", err)
	}
	existing.Object["spec"] = spec
	if _, err := client.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("standin: update APIService: %w", err)
	}
	return nil
}

// waitAvailable polls until kube-aggregator reports the APIService
// Available, i.e. it reached this server through the Service with its
// front-proxy certificate.
func (s *StandIn) waitAvailable(ctx context.Context) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, availablePollEvery, true, func(ctx context.Context) (bool, error) {
		obj, err := s.dyn.Resource(apiServiceGVR).Get(ctx, apiServiceName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				if m["status"] == "True" {
					return true, nil
				}
				if msg := fmt.Sprint(m["reason"], ": ", m["message"]); msg != last {
					last = msg
					klog.FromContext(ctx).V(2).Info("APIService not available yet", "reason", m["reason"], "message", m["message"])
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("standin: APIService %s never became Available (last: %s): %w", apiServiceName, last, err)
	}
	return nil
}
