// Package nodeagent is a tiny kubelet for the e2e environment: it makes a
// member kube-apiserver's own pods/exec, attach, log and portforward paths
// real without containers.
//
// One agent registers one Ready Node, binds every unscheduled pod of its
// member to that node (there is no scheduler), and runs each container's
// command+args as a local process in RootDir/<ns>/<pod>/<container>. Images
// are ignored; the "pod network" is the host loopback. Container stdout and
// stderr go to CRI-format log files (one per container instance), which
// /containerLogs serves with follow, tail, timestamps, limits and since.
//
// The kubelet API is served over HTTPS the way kubelet and a CRI runtime
// together serve it: the CRI streaming library (k8s.io/cri-streaming) speaks
// SPDY and the WebSocket v1-v4 channel protocols directly, and, as kubelet
// does, WebSocket v5 exec/attach and SPDY-over-WebSocket port-forward are
// translated (k8s.io/apiserver/pkg/util/proxy) to SPDY against the same
// handlers on an in-memory listener, so no second port is opened.
//
// Exec runs the command as a local process in the container's directory
// with its environment (a pty for tty, resizes applied) and dies with the
// container; attach joins the container process's stdin and the fan-out of
// its output; port-forward dials 127.0.0.1:<port>.
//
// Pod status follows kubelet's shape (conditions, named container statuses,
// restart counts, Pending -> Running -> Succeeded/Failed), deletion honours
// the grace period and finalizes with a UID-preconditioned delete, and when
// Run returns every process group the agent started has been killed and
// reaped.
package nodeagent
