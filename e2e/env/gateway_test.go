package env

import "testing"

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
