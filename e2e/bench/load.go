package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Load is what one path did during a measurement: a latency per successful
// call, the calls that failed and the wall time they were spread over.
type Load struct {
	Latencies []time.Duration
	Errors    int
	FirstErr  error
	Elapsed   time.Duration
}

// Add merges o into l (rounds of the same path).
func (l *Load) Add(o Load) {
	l.Latencies = append(l.Latencies, o.Latencies...)
	l.Errors += o.Errors
	if l.FirstErr == nil {
		l.FirstErr = o.FirstErr
	}
	l.Elapsed += o.Elapsed
}

// PerSecond is successful calls per second of wall time.
func (l Load) PerSecond() float64 {
	if l.Elapsed <= 0 {
		return 0
	}
	return float64(len(l.Latencies)) / l.Elapsed.Seconds()
}

// Err is an error when nothing succeeded: a figure built on no sample would
// be a lie, so the caller reports the measurement as not made.
func (l Load) Err() error {
	if len(l.Latencies) == 0 {
		if l.FirstErr != nil {
			return fmt.Errorf("no call succeeded (%d failed): %w", l.Errors, l.FirstErr)
		}
		return fmt.Errorf("no call was made")
	}
	return nil
}

// RunLoad calls fn from concurrency goroutines, each calling again as soon
// as the last call returned (closed loop), until d has passed.
func RunLoad(ctx context.Context, concurrency int, d time.Duration, fn func(context.Context) error) Load {
	var (
		mu  sync.Mutex
		out Load
		wg  sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for range concurrency {
		wg.Go(func() {
			var lat []time.Duration
			var errs int
			var firstErr error
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				if err := fn(ctx); err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			out.Latencies = append(out.Latencies, lat...)
			out.Errors += errs
			if out.FirstErr == nil {
				out.FirstErr = firstErr
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	out.Elapsed = time.Since(start)
	return out
}

// Interleave runs the gateway and the direct path rounds times each, in the
// order G D D G G D ..., so drift in machine load during the run falls on
// both paths alike, and returns what each path did over all rounds.
func Interleave(rounds int, gateway, direct func() Load) (gw, dr Load) {
	loads := InterleaveAll(rounds, gateway, direct)
	return loads[0], loads[1]
}

// InterleaveAll is Interleave for any number of paths: each round runs them
// all, forwards in even rounds and backwards in odd ones (A B C, C B A, ...),
// so no path is always first or always last after another. It returns what
// each path did over all rounds, in the order of paths.
func InterleaveAll(rounds int, paths ...func() Load) []Load {
	out := make([]Load, len(paths))
	for i := range rounds {
		for j := range paths {
			k := j
			if i%2 == 1 {
				k = len(paths) - 1 - j
			}
			out[k].Add(paths[k]())
		}
	}
	return out
}
