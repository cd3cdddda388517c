package env

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAuthMode(t *testing.T) {
	tests := []struct {
		name string
		def  string
		args []string
		want string
	}{
		{"default", "passthrough", nil, "passthrough"},
		{"equals form", "passthrough", []string{"--auth-mode=authorize"}, "authorize"},
		{"separate value", "passthrough", []string{"--auth-mode", "authorize"}, "authorize"},
		{"single dash", "authorize", []string{"-auth-mode=passthrough"}, "passthrough"},
		{"last wins", "passthrough", []string{"--auth-mode=authorize", "--auth-mode=passthrough"}, "passthrough"},
		{"other flags ignored", "passthrough", []string{"--auth-cache-ttl=1s", "--leader-elect=false"}, "passthrough"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := authMode(tt.def, tt.args); got != tt.want {
				t.Errorf("authMode(%q, %q) = %q, want %q", tt.def, tt.args, got, tt.want)
			}
		})
	}
}

// TestGatewayDataRaces reads the race detector's reports out of a gateway
// log as the -race build writes them, between klog lines.
func TestGatewayDataRaces(t *testing.T) {
	report := func(n string) string {
		return "==================\nWARNING: DATA RACE\nWrite at 0x" + n + " by goroutine 7:\n  main.f()\n==================\n"
	}
	for _, tc := range []struct {
		name string
		log  string
		want int
	}{
		{"clean", "=== gateway start\nI1203 serving\n=== gateway exit: <nil>\n", 0},
		{"two races", "I1203 serving\n" + report("1") + "I1203 more\n" + report("2") + "=== gateway exit: exit status 66\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "gateway.log")
			if err := os.WriteFile(logPath, []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			e := &Env{gateway: &gateway{proc: &process{logPath: logPath}}}
			races, err := e.GatewayDataRaces()
			if err != nil || len(races) != tc.want {
				t.Fatalf("got %d reports (%v), want %d: %q", len(races), err, tc.want, races)
			}
			for _, r := range races {
				if !strings.HasPrefix(r, "WARNING: DATA RACE") || strings.Contains(r, "I1203") || !strings.Contains(r, "main.f()") {
					t.Errorf("report %q", r)
				}
			}
			// The check the e2e tests end with: an error only for a -race
			// build whose log holds reports.
			if err := e.StopGatewayAndCheckRaces(); err != nil {
				t.Errorf("StopGatewayAndCheckRaces without -race: %v, want nil", err)
			}
			e.opts.Gateway.Race = true
			err = e.StopGatewayAndCheckRaces()
			if (err != nil) != (tc.want > 0) || (err != nil && !strings.Contains(err.Error(), fmt.Sprintf("reported %d data races", tc.want))) {
				t.Errorf("StopGatewayAndCheckRaces with -race: %v, want an error naming %d races", err, tc.want)
			}
		})
	}
}
