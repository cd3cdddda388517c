// Package bench measures the gateway against the direct path on the e2e
// environment (real kube-apiservers) and renders the figures as Markdown.
//
// Every measurement runs both paths in the same process and run, interleaved
// in rounds (gateway, direct, direct, gateway, ...), so load from whatever
// else the machine is doing hits both sides alike; a table then shows the
// absolute figures of each, their ratio, the target and whether it was met.
// Numbers never fail a run: a missed target is a row that says "missed".
// Only a measurement that cannot be made (an exec that errors, a pod that
// does not start) is an error.
//
// The direct paths are karmada-apiserver itself for passthrough requests and
// Karmada's cluster proxy for the routes the gateway rewrites, which is what
// the gateway forwards to; the difference is what the gateway adds.
package bench
