// Package streamfollow follows the streams the gateway relays between a
// client and a member cluster, frame by frame: the upgraded exec, attach
// and port-forward tunnels (SPDY/3.1, and WebSocket with the
// channel.k8s.io protocols) and pods/log follows.
//
// One API serves every consumer. A Stream wraps the upstream side of an
// upgraded tunnel as httputil.ReverseProxy copies it; it
//   - decodes remotecommand channels for an Observer: stdin (client),
//     stdout and stderr (server), terminal resizes (client), so a session
//     can be recorded (pkg/recording);
//   - keeps the exit Status the server sent on the error channel and the
//     bytes each way, and reports once, when the tunnel closes, how it
//     ended (Summary), so the request can be audited (pkg/audit);
//   - tells the client when the member cut a stream whose protocol promises
//     an exit status (remotecommand v4 over SPDY, v4 and v5 over
//     WebSocket): when upstream ends the tunnel while the client is still
//     there and no Status came, it appends a Failure naming the member on
//     the error channel, which client-go's executors return as an error
//     where they would have read the silence as success (SPDY) or as an
//     anonymous abnormal closure (WebSocket). The same Failure tells a
//     client why the gateway itself ended its stream (Terminate: the
//     gateway shut down past its grace period, or a recording that fails
//     closed failed).
//
// A Failure can follow only a whole frame. So for those protocols the
// server's frames reach the client whole: the start of a frame is held back
// until the rest of it came (kubelets write at most 32 KiB of output per
// frame; a frame longer than maxHeldFrame passes as it comes and, if it is
// cut, is completed with zero bytes before the Failure). A message cut
// between its frames is ended with an empty final frame. Wherever upstream
// cuts the tunnel, the client is told.
//
// Frames are read as they pass: SPDY frames by their 8-byte headers (the
// client's SYN_STREAM header blocks through spdystream's Framer, whose zlib
// context spans the connection, to learn which stream carries which
// channel), WebSocket frames by RFC 6455 headers (client frames unmasked
// only when an Observer wants their payload). Input that does not read as
// the protocol ends the following, never the stream: it is relayed as
// before, unwatched.
//
// A pods/log follow ends the same way whether the container ended or the
// member's kubelet died; FollowedLog and ContainerEnd let the caller check
// a clean end against the member's pod.
package streamfollow
