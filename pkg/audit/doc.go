// Package audit writes down every request the gateway routes to a member
// cluster (pod exec, attach, log, portforward, pods/proxy, services/proxy,
// merged events) and every refusal of one, as audit.k8s.io/v1 Events, so
// pipelines that ingest kube-apiserver's audit log take them unchanged.
//
// Event is written here, not imported from k8s.io/apiserver (a heavy
// dependency for one struct): it marshals to the same JSON, which is the
// wire format; e2e decodes it with kube-apiserver's own types, strictly.
// What audit.k8s.io/v1 has a field for goes in that field (user,
// impersonatedUser, sourceIPs, userAgent, objectRef with the pod template's
// UID, responseStatus, the stage timestamps); what only the gateway knows
// goes in annotations under gateway.karmada.io/ (member cluster, the member
// pod's UID when authorize mode read it, container, command argv, tty, stdin,
// exit code, how the stream ended, bytes each way, the recording), and the
// authorize-mode decision under kube-apiserver's own
// authorization.k8s.io/decision and authorization.k8s.io/reason. A bearer
// token is never written: at most its SHA-256.
//
// Streams get two events, as kube-apiserver gives long-running requests:
// ResponseStarted when the stream opens, ResponseComplete when it ends;
// other requests get ResponseComplete only.
//
// Sinks (a rotated log file with a size cap, a webhook sending EventList
// batches as kube-apiserver's audit webhook does) each have a bounded
// buffer: an event a full buffer cannot take is dropped and counted, never
// waited for, so auditing never blocks a stream.
package audit
