// Package apiresponse writes what the gateway answers Kubernetes API clients
// itself: errors as a metav1.Status with their HTTP code (WriteStatus), the
// form kubectl and client-go report as they report kube-apiserver's, and an
// upstream answer the gateway read but does not change, relayed as it came
// (Relay); and the text of an upstream's refusal the gateway repeats in its
// own errors and headers (Message, Printable). The proxy and the
// member-events merge both answer this way; the package depends on neither.
package apiresponse
