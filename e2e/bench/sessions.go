package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

const sessionsRSSLimit = 200 << 20 // 200 concurrent streams under 200 MiB RSS

// Sessions holds Sizes.Sessions exec sessions (`cat`, SPDY) open through the
// gateway for Sizes.HoldFor, each proven live by an echo, and reports the
// gateway's RSS and CPU from its process metrics.
func (r *Runner) Sessions(ctx context.Context) (*Table, error) {
	p, err := r.rewrittenPaths(env.UserExecOnly)
	if err != nil {
		return nil, err
	}
	rssBefore, cpuBefore, err := r.gatewayProcess(ctx)
	if err != nil {
		return nil, err
	}
	n := r.Sizes.Sessions
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type session struct {
		in   *io.PipeWriter
		done chan error
	}
	sessions := make([]*session, n)
	live := make(chan error, n)
	sem := make(chan struct{}, 20) // open 20 at a time, as a burst of users would
	r.logf("opening %d exec sessions through the gateway", n)
	openStart := time.Now()
	for i := range n {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		s := &session{in: inW, done: make(chan error, 1)}
		sessions[i] = s
		go func() {
			sem <- struct{}{}
			err := execSession(ctx, p.gateway, "SPDY", []string{"cat"}, inR, outW)
			outW.CloseWithError(fmt.Errorf("session ended: %v", err))
			s.done <- err
		}()
		go func() {
			err := echo(inW, outR, i)
			<-sem // this session is open (or failed): let the next one start
			live <- err
			_, _ = io.Copy(io.Discard, outR)
		}()
	}
	for range n {
		if err := <-live; err != nil {
			return nil, fmt.Errorf("open %d sessions: %w", n, err)
		}
	}
	opened := time.Since(openStart)
	r.logf("%d sessions live after %s; holding for %s", n, opened.Round(time.Millisecond), r.Sizes.HoldFor)

	rssPeak := 0.0
	_, cpuHoldStart, err := r.gatewayProcess(ctx)
	if err != nil {
		return nil, err
	}
	holdStart := time.Now()
	tick := time.NewTicker(time.Second)
	var sampleErr error
	for time.Since(holdStart) < r.Sizes.HoldFor {
		rss, _, err := r.gatewayProcess(ctx)
		if err != nil {
			sampleErr = err
			break
		}
		rssPeak = max(rssPeak, rss)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	tick.Stop()
	if sampleErr != nil {
		return nil, sampleErr
	}
	rssEnd, cpuHoldEnd, err := r.gatewayProcess(ctx)
	if err != nil {
		return nil, err
	}
	rssPeak = max(rssPeak, rssEnd)
	held := time.Since(holdStart)

	// Every session must still be open at the end of the hold.
	var ended int
	for _, s := range sessions {
		select {
		case <-s.done:
			ended++
		default:
		}
	}
	var wg sync.WaitGroup
	for _, s := range sessions {
		_ = s.in.Close()
		wg.Go(func() {
			select {
			case <-s.done:
			case <-time.After(30 * time.Second):
			}
		})
	}
	wg.Wait()
	if ended > 0 {
		return nil, fmt.Errorf("%d of %d sessions ended during the hold", ended, n)
	}

	cpu := (cpuHoldEnd - cpuHoldStart) / held.Seconds()
	t := &Table{
		Title:   fmt.Sprintf("%d concurrent exec sessions through the gateway, held %s", n, held.Round(time.Second)),
		Columns: []string{"measurement", "value", "target", "verdict"},
		Note: fmt.Sprintf("Sessions are `cat` over SPDY, each proven live by an echo, opened 20 at a time (all live after %s). "+
			"RSS and CPU are the gateway process's own (process_resident_memory_bytes, process_cpu_seconds_total on its metrics port); "+
			"RSS peak is sampled every second.", opened.Round(time.Millisecond)) + r.proxyNote("The gateway's upstream"),
	}
	t.Add("gateway RSS before", FormatBytes(rssBefore), "", "")
	t.Add("gateway RSS peak while held", FormatBytes(rssPeak), "< 200 MiB", string(AtMost(rssPeak, sessionsRSSLimit-1)))
	t.Add("gateway RSS per session (peak − before)", FormatBytes((rssPeak-rssBefore)/float64(n)), "", "")
	t.Add("gateway CPU while held (idle streams)", fmt.Sprintf("%.3f cores", cpu), "", "")
	t.Add("gateway CPU opening the sessions", fmt.Sprintf("%.2f core-seconds", cpuHoldStart-cpuBefore), "", "")
	return t, nil
}

// echo proves session i live: what is written to its cat comes back.
func echo(in io.Writer, out io.Reader, i int) error {
	want := fmt.Sprintf("live-%d\n", i)
	if _, err := io.WriteString(in, want); err != nil {
		return err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err == nil && line != want {
		err = fmt.Errorf("session %d echoed %q", i, line)
	}
	return err
}
