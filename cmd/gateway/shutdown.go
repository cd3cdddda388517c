package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// drainStep is one part of the shutdown, bounded by the drain context.
type drainStep struct {
	name string
	run  func(context.Context) error
}

// drain runs every step at once and waits for all of them: run one after
// the other, a step waiting out the deadline (a log -f holding
// http.Server.Shutdown) would leave the next none of the grace period.
func drain(ctx context.Context, steps ...drainStep) error {
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, s := range steps {
		wg.Go(func() {
			if err := s.run(ctx); err != nil {
				errs[i] = fmt.Errorf("%s: %w", s.name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitClosed is a drain step that waits for done.
func waitClosed(done <-chan struct{}) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
