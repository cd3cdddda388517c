package main

import (
	"flag"
	"strings"
	"testing"
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
