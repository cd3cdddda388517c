package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/env"
)

const (
	recordedTargetRow = "1,000 recorded idle TTY sessions < 300 MiB RSS"
	// recordingsWrittenTimeout bounds the wait for the recorded gateway to
	// write its recordings once the sessions closed.
	recordingsWrittenTimeout = time.Minute
)

// recordedGateway is one of the two gateways recorded-sessions compares.
type recordedGateway struct {
	name, label string
	recorded    bool
	args        []string
}

// recordedCheck is what the recorded gateway did with the sessions it held.
type recordedCheck struct {
	open         int     // recordings open in the directory at the end of the hold
	stillOpen    int     // recordings still open once the sessions closed
	written      int     // recordings written to the directory then
	total        float64 // karmada_gateway_recordings_total then
	failures     float64 // karmada_gateway_recording_failures_total, every reason
	audited      float64 // karmada_gateway_audit_events_total{sink="log"}
	auditDropped float64 // karmada_gateway_audit_events_dropped_total{sink="log"}
}

// recordedMetrics are what recordedCheck reads from the recorded gateway,
// in its field order from total on.
var recordedMetrics = []string{
	"karmada_gateway_recordings_total",
	`karmada_gateway_recording_failures_total{reason="start"}`,
	`karmada_gateway_recording_failures_total{reason="write"}`,
	`karmada_gateway_recording_failures_total{reason="cap"}`,
	`karmada_gateway_audit_events_total{sink="log"}`,
	`karmada_gateway_audit_events_dropped_total{sink="log"}`,
}

// verify proves that the recording happened for the sessions of l: a
// recording open at the end of the hold for each one still open then,
// each written once they closed and counted by the gateway, none failed,
// and each session's ResponseStarted audited. Without it, sessions that
// went unrecorded (a wrong flag, a mode that does not match them,
// fail-open failures) would give the recorded row an unrecorded figure and
// a "met".
func (c recordedCheck) verify(l sessionLoad) error {
	var errs []error
	opened := l.opened
	if opened == 0 {
		errs = append(errs, errors.New("no session opened, so no recording was proven"))
	}
	if held := opened - l.ended; c.open < held {
		errs = append(errs, fmt.Errorf("%d sessions held but %d recordings open", held, c.open))
	}
	if c.stillOpen > 0 {
		errs = append(errs, fmt.Errorf("%d recordings not finished %s after the sessions closed", c.stillOpen, recordingsWrittenTimeout))
	}
	if c.written < opened {
		errs = append(errs, fmt.Errorf("%d sessions held but %d recordings written", opened, c.written))
	}
	if c.total != float64(c.written) {
		errs = append(errs, fmt.Errorf("karmada_gateway_recordings_total is %v, %d recordings written", c.total, c.written))
	}
	if c.failures > 0 {
		errs = append(errs, fmt.Errorf("karmada_gateway_recording_failures_total is %v", c.failures))
	}
	if c.audited < float64(opened) {
		errs = append(errs, fmt.Errorf("%d sessions held but %v audit events logged", opened, c.audited))
	}
	return errors.Join(errs...)
}

// recordingFiles counts dir's recordings: open ones (written to a hidden
// .<name>.tmp) and written ones (renamed to <name>, a .cast, when their
// session ended).
func recordingFiles(dir string) (open, written int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("recording directory: %w", err)
	}
	for _, e := range entries {
		switch name := e.Name(); {
		case strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".cast.tmp"):
			open++
		case strings.HasSuffix(name, ".cast"):
			written++
		}
	}
	return open, written, nil
}

// RecordedSessions is what recording idle TTY sessions costs the gateway's
// memory (issue #28): Sizes.RecordedSessions idle TTY exec sessions held
// (holdSessions, as scale-streams holds them) through a gateway with
// recording and audit off, then through one with --record-sessions=tty and
// an audit log, each a fresh process started beside the environment's
// (StartExtraGateway, pinned as the environment's in cpuset mode) and
// stopped after. The recorded gateway must be seen recording every session
// (recordedCheck.verify), or the section is not measured.
func (r *Runner) RecordedSessions(ctx context.Context) (*Table, error) {
	n := r.Sizes.RecordedSessions
	dir, recordings, auditLog, err := recordingDirs("bench-recorded-sessions-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	gateways := []recordedGateway{
		{name: "gateway-unrecorded", label: "recording and audit off",
			args: []string{"--max-streams-per-client=0", "--record-sessions=none"}},
		{name: "gateway-recorded", label: "tty recording and audit log", recorded: true,
			args: []string{"--max-streams-per-client=0", "--record-sessions=tty", "--record-sessions-dir=" + recordings, "--audit-log-path=" + auditLog}},
	}
	t := &Table{
		Title: "Recorded idle TTY exec sessions: gateway RSS with recording off and on",
		Columns: []string{"gateway", "sessions", "opened", "RSS before", "RSS with sessions (peak)", "RSS per session",
			"Go heap with sessions (peak)", "heap per session", "recordings open / written", "audit events logged", "target", "verdict"},
		Note: fmt.Sprintf("Two gateway processes started for this section beside the environment's, one after the other, each fresh and stopped "+
			"after: `%s` (no audit sink), and `%s` (recording directory and audit log in a temporary directory). "+
			"Sessions are TTY exec sessions (`kubectl exec -it`: `sh -c 'echo live-<i>; exec cat'`) over SPDY with the exec-only token, "+
			"opened %d at a time, each proven live by its first line, then held %s with nothing sent. "+
			"RSS and Go heap (go_memstats_heap_alloc_bytes) are each gateway process's own, sampled every second; per session is (peak − before)/opened. "+
			"Recordings open are the recorded gateway's open recording files at the end of the hold; written, those in the directory once the "+
			"sessions were dropped (and karmada_gateway_recordings_total agreed): the section fails unless every session held was recorded. "+
			"Audit events: karmada_gateway_audit_events_total{sink=\"log\"} then; each session is audited at its 101 (ResponseStarted) "+
			"and at its end (ResponseComplete), and fewer events than sessions fail the section too. Ratio: recorded to unrecorded.",
			flags(gateways[0].args, dir), flags(gateways[1].args, dir), sessionBurst, r.Sizes.ScaleHold) + r.proxyNote("The gateways' upstream"),
	}
	var loads []sessionLoad
	for _, g := range gateways {
		l, c, err := r.holdRecorded(ctx, g, n, recordings)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", g.name, g.label, err)
		}
		recs, audit, target, verdict := "off", "off", "", NoTarget
		if g.recorded {
			if err := c.verify(l); err != nil {
				return nil, fmt.Errorf("%s did not record every session: %w", g.name, err)
			}
			recs, audit = fmt.Sprintf("%d / %d", c.open, c.written), strconv.FormatFloat(c.audited, 'f', -1, 64)
			if c.auditDropped > 0 {
				audit += fmt.Sprintf(" (%v dropped)", c.auditDropped)
			}
			target, verdict = l.streamsVerdict(recordedTargetRow)
		}
		t.Add(g.label, strconv.Itoa(n), l.openedCell(), FormatBytes(l.rssBefore), FormatBytes(l.rssPeak), FormatBytes(l.perSession(l.rssPeak-l.rssBefore)),
			FormatBytes(l.heapPeak), FormatBytes(l.perSession(l.heapPeak-l.heapBefore)), recs, audit, target, string(verdict))
		loads = append(loads, l)
	}
	off, on := loads[0], loads[1]
	t.Add("ratio, recorded / unrecorded", "", "", FormatRatio(Ratio(on.rssBefore, off.rssBefore)), FormatRatio(Ratio(on.rssPeak, off.rssPeak)),
		FormatRatio(Ratio(on.perSession(on.rssPeak-on.rssBefore), off.perSession(off.rssPeak-off.rssBefore))),
		FormatRatio(Ratio(on.heapPeak, off.heapPeak)), FormatRatio(Ratio(on.perSession(on.heapPeak-on.heapBefore), off.perSession(off.heapPeak-off.heapBefore))))
	if n != scaleStreamsTarget {
		t.Add(gateways[1].label, strconv.Itoa(scaleStreamsTarget), "not in this run's sizes", "", "", "", "", "", "", "", recordedTargetRow, string(NotMeasured))
	}
	return t, nil
}

// recordingDirs makes a temporary directory for a recorded gateway (the
// caller removes dir): its recording directory and audit log path.
func recordingDirs(prefix string) (dir, recordings, auditLog string, err error) {
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", "", "", err
	}
	recordings, auditLog = filepath.Join(dir, "recordings"), filepath.Join(dir, "audit.log")
	if err := os.Mkdir(recordings, 0o700); err != nil {
		os.RemoveAll(dir)
		return "", "", "", err
	}
	return dir, recordings, auditLog, nil
}

// flags are args as the table's note shows them: the temporary directory
// dir, which changes with every run, as <tmp>.
func flags(args []string, dir string) string {
	return strings.ReplaceAll(strings.Join(args, " "), dir, "<tmp>")
}

// holdRecorded starts g, holds n idle TTY sessions through it and stops it;
// for the recorded gateway it counts the recordings in the directory at the
// end of the hold and, once the sessions closed, waits for them to be
// written and reads the gateway's recording and audit counters.
func (r *Runner) holdRecorded(ctx context.Context, g recordedGateway, n int, recordings string) (l sessionLoad, c recordedCheck, err error) {
	r.logf("recorded sessions: starting %s (%s)", g.name, strings.Join(g.args, " "))
	x, err := r.Env.StartExtraGateway(ctx, g.name, g.args...)
	if err != nil {
		return l, c, fmt.Errorf("start: %w", err)
	}
	defer x.Stop()
	o := holdOptions{n: n, holdFor: r.Sizes.ScaleHold, metricsURL: x.MetricsURL(), tty: true}
	if g.recorded {
		o.held = func() (err error) {
			c.open, _, err = recordingFiles(recordings)
			return err
		}
	}
	if l, err = r.holdSessions(ctx, unlimited(x.Config(env.UserExecOnly)), o); err != nil || !g.recorded {
		return l, c, err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, recordingsWrittenTimeout, true, func(ctx context.Context) (bool, error) {
		open, written, err := recordingFiles(recordings)
		if err != nil {
			return false, err
		}
		v, err := r.scrape(ctx, x.MetricsURL(), recordedMetrics...)
		if err != nil {
			return false, err
		}
		c.stillOpen, c.written = open, written
		c.total, c.failures, c.audited, c.auditDropped = v[0], v[1]+v[2]+v[3], v[4], v[5]
		return open == 0 && c.total == float64(written), nil
	})
	if ctx.Err() != nil || (err != nil && !wait.Interrupted(err)) {
		return l, c, errors.Join(ctx.Err(), err)
	}
	// A timeout leaves c as last seen, which verify reports.
	return l, c, nil
}
