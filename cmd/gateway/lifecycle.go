package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/serving"
)

// hasOtherThanDeadline reports whether err, a drain's, joins any error but
// the drain's deadline.
func hasOtherThanDeadline(err error) bool {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return !errors.Is(err, context.DeadlineExceeded)
	}
	for _, e := range joined.Unwrap() {
		if hasOtherThanDeadline(e) {
			return true
		}
	}
	return false
}

// server is an http.Server and the listener it serves.
type server struct {
	srv *http.Server
	ln  net.Listener
}

// lifecycle runs the gateway's parts and stops them all the same way,
// whatever stopped the first: SIGTERM, or an error in a server or the
// labeler. Before, an error returned at once and the process exited with
// open streams cut, nothing drained and the labeler's Lease held, so the
// other replica waited a whole lease duration to take over.
type lifecycle struct {
	health         *health
	proxy, metrics server
	streams        interface{ Shutdown(context.Context) error }
	labeler        interface{ Run(context.Context) error } // nil: no labeler
	background     []func(context.Context)                 // run until the end (certificate reloads)
	start          func(context.Context)                   // starts what needs ctx (informers)
	grace          time.Duration
}

// run serves until ctx ends or a part fails, then drains: not ready first;
// then, all at once and up to the same grace period: stop accepting
// connections, refuse new requests on open ones with a 503 Status while
// open streams drain, and wait for the labeler (stopped by the cancelled
// context) to release its Lease. /metrics and /readyz stay up until the
// end. It returns the part's error, if one failed, joined with the drain's.
func (l *lifecycle) run(parent context.Context) error {
	logger := klog.FromContext(parent)
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	failed := make(chan error, 3)
	fail := func(err error) {
		failed <- err
		cancel()
	}

	go func() {
		if err := serving.Serve(l.metrics.srv, l.metrics.ln); err != nil {
			fail(fmt.Errorf("metrics server: %w", err))
		}
	}()
	for _, run := range l.background {
		go run(ctx)
	}
	if l.start != nil {
		l.start(ctx)
	}
	// labelerDone closes once the labeler stopped, its lease released.
	labelerDone := make(chan struct{})
	if l.labeler != nil {
		go func() {
			defer close(labelerDone)
			if err := l.labeler.Run(ctx); err != nil {
				fail(fmt.Errorf("labeler: %w", err))
			}
		}()
	} else {
		close(labelerDone)
	}
	go func() {
		if err := serving.Serve(l.proxy.srv, l.proxy.ln); err != nil {
			fail(fmt.Errorf("proxy server: %w", err))
		}
	}()

	<-ctx.Done()
	var err error
	select {
	case err = <-failed:
		logger.Error(err, "Gateway part failed; shutting down")
	default:
	}

	logger.Info("shutting down", "gracePeriod", l.grace)
	l.health.shuttingDown()
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), l.grace)
	defer cancelDrain()
	drained := drain(drainCtx,
		drainStep{"proxy server shutdown", l.proxy.srv.Shutdown},
		drainStep{"drain streams", l.streams.Shutdown},
		drainStep{"labeler lease release", waitClosed(labelerDone)},
	)
	if drained != nil && drainCtx.Err() != nil && !hasOtherThanDeadline(drained) {
		// The grace period ended with streams open: they were cut, each
		// told so and recorded. A rollout's outcome, not the gateway's
		// failure: it exits 0.
		logger.Info("Grace period over: what was still open was ended", "gracePeriod", l.grace, "open", drained.Error())
		drained = nil
	}
	err = errors.Join(err, drained)
	if mErr := l.metrics.srv.Shutdown(drainCtx); mErr != nil {
		err = errors.Join(err, fmt.Errorf("metrics server shutdown: %w", mErr))
	}
	return err
}
