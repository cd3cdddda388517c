package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
)

// Section is one measurement producing one table.
type Section struct {
	Name string
	// NeedsEnv is false for in-process measurements, which run before the
	// environment starts so its in-process components do not disturb the heap.
	NeedsEnv bool
	Run      func(*Runner, context.Context) (*Table, error)
}

// Sections lists every measurement in the order they run.
var Sections = []Section{
	{Name: "resolver", Run: (*Runner).Resolver},
	{Name: "passthrough", NeedsEnv: true, Run: (*Runner).Passthrough},
	{Name: "stream-setup", NeedsEnv: true, Run: (*Runner).StreamSetup},
	{Name: "job-replay", NeedsEnv: true, Run: (*Runner).JobReplay},
	{Name: "direct-access", NeedsEnv: true, Run: (*Runner).DirectAccess},
	{Name: "nagle", NeedsEnv: true, Run: (*Runner).Nagle},
	{Name: "node-client", NeedsEnv: true, Run: (*Runner).NodeClient},
	{Name: "exec", NeedsEnv: true, Run: (*Runner).Exec},
	{Name: "sessions", NeedsEnv: true, Run: (*Runner).Sessions},
	{Name: "watch", NeedsEnv: true, Run: (*Runner).Watch},
	{Name: "logs", NeedsEnv: true, Run: (*Runner).Logs},
	{Name: "events", NeedsEnv: true, Run: (*Runner).Events},
	{Name: "labeler", NeedsEnv: true, Run: (*Runner).Labeler},
	{Name: "scale-pods", Run: (*Runner).ScalePods},
	{Name: "scale-streams", NeedsEnv: true, Run: (*Runner).ScaleStreams},
	{Name: "recorded-sessions", NeedsEnv: true, Run: (*Runner).RecordedSessions},
	{Name: "recorded-exec", NeedsEnv: true, Run: (*Runner).RecordedExec},
}

// RunSections runs the sections named in only (all when empty) that fit r:
// the environment's sections when r.Env is set, the in-process ones when it
// is not. It writes each table to w as it is done. A section that cannot be measured is
// reported in place of its table and the others still run; the joined
// errors are returned.
func RunSections(ctx context.Context, r *Runner, only []string, w io.Writer) []error {
	var errs []error
	for _, s := range Sections {
		if len(only) > 0 && !slices.Contains(only, s.Name) {
			continue
		}
		if s.NeedsEnv != (r.Env != nil) {
			continue
		}
		t, err := s.Run(r, ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
			fmt.Fprintf(w, "### %s\n\nNot measured: %v\n\n", s.Name, err)
			continue
		}
		if err := t.Markdown(w); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
