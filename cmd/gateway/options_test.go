package main

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestValidateServiceProxyInBothModes(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--insecure-serve-http", "--enable-service-proxy"}, ""},
		{[]string{"--insecure-serve-http", "--enable-service-proxy", "--auth-mode=authorize"}, ""},
		{[]string{"--insecure-serve-http", "--enable-service-proxy", "--auth-mode=bogus"}, `--auth-mode must be "passthrough" or "authorize"`},
		{[]string{"--insecure-serve-http", "--auth-mode=authorize"}, ""},
		{[]string{"--insecure-serve-http", "--member-access=direct"}, ""},
		{[]string{"--insecure-serve-http", "--member-access=direct", "--auth-mode=authorize"}, ""},
		{[]string{"--insecure-serve-http", "--member-access=proxy"}, `--member-access must be "cluster-proxy" or "direct", not "proxy"`},
	} {
		fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
		o := bindFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%v: validate() = %v, want %q", tc.args, err, tc.wantErr)
		}
	}
}

func TestMergeMemberEventsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--merge-member-events=false"}, false},
	} {
		fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
		o := bindFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if o.mergeMemberEvents != tc.want {
			t.Errorf("%v: mergeMemberEvents = %v, want %v", tc.args, o.mergeMemberEvents, tc.want)
		}
	}
}

func TestServingFlags(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		wantIdle   time.Duration
		wantReload time.Duration
		wantErr    string
	}{
		// kube-apiserver's idle timeout, and http.DefaultTransport's.
		{nil, 90 * time.Second, 5 * time.Second, ""},
		{[]string{"--idle-timeout=0"}, 0, 5 * time.Second, ""},
		{[]string{"--idle-timeout=-1s"}, 0, 0, "--idle-timeout must not be negative"},
		{[]string{"--certificate-reload-interval=1m"}, 90 * time.Second, time.Minute, ""},
		{[]string{"--certificate-reload-interval=0"}, 0, 0, "--certificate-reload-interval must be positive"},
	} {
		fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
		o := bindFlags(fs)
		if err := fs.Parse(append([]string{"--insecure-serve-http"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		err := o.validate()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: validate() = %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil || o.idleTimeout != tc.wantIdle || o.certReloadInterval != tc.wantReload {
			t.Errorf("%v: idle %v, reload %v, err %v; want %v, %v", tc.args, o.idleTimeout, o.certReloadInterval, err, tc.wantIdle, tc.wantReload)
		}
	}
}

// TestDeadlineFlags: every outbound call has a deadline, so none of the
// deadline flags may be turned off, and each one reaches its option.
func TestDeadlineFlags(t *testing.T) {
	for _, flagName := range []string{"upstream-header-timeout", "auth-timeout", "member-timeout", "kube-api-timeout"} {
		for _, v := range []string{"0s", "-1s"} {
			fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
			o := bindFlags(fs)
			if err := fs.Parse([]string{"--insecure-serve-http", "--" + flagName + "=" + v}); err != nil {
				t.Fatal(err)
			}
			if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--"+flagName) {
				t.Errorf("--%s=%s: validate() = %v, want an error naming the flag", flagName, v, err)
			}
		}
	}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	o := bindFlags(fs)
	if err := fs.Parse([]string{"--insecure-serve-http", "--upstream-header-timeout=1m", "--auth-timeout=2s", "--member-timeout=3s", "--kube-api-timeout=4s"}); err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	if o.upstreamHeaderTimeout != time.Minute || o.authTimeout != 2*time.Second || o.memberTimeout != 3*time.Second || o.kubeAPITimeout != 4*time.Second {
		t.Errorf("parsed %v %v %v %v", o.upstreamHeaderTimeout, o.authTimeout, o.memberTimeout, o.kubeAPITimeout)
	}
}

// TestCacheTTLFlags: the opt-in caches take a duration, off by default, and
// refuse a negative one.
func TestCacheTTLFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{nil, ""},
		{[]string{"--admission-cache-ttl=5s", "--member-copy-cache-ttl=5s"}, ""},
		{[]string{"--admission-cache-ttl=-1s"}, "--admission-cache-ttl must not be negative"},
		{[]string{"--member-copy-cache-ttl=-1s"}, "--member-copy-cache-ttl must not be negative"},
	} {
		fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
		o := bindFlags(fs)
		if err := fs.Parse(append([]string{"--insecure-serve-http"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if err := o.validate(); (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%v: validate() = %v, want %q", tc.args, err, tc.wantErr)
		}
	}
	o := bindFlags(flag.NewFlagSet("gateway", flag.ContinueOnError))
	if o.admissionCacheTTL != 0 || o.memberCopyCacheTTL != 0 {
		t.Errorf("defaults %v, %v; want both caches off", o.admissionCacheTTL, o.memberCopyCacheTTL)
	}
}
