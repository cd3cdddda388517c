package env

import "testing"

func TestEtcdVersion(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want bool // answers progress requests
		bad  bool // no version read
	}{
		{out: "etcd Version: 3.7.0\nGit SHA: Not provided\nGo Version: go1.26.8\n", want: true},
		{out: "etcd Version: 3.5.13\n", want: true},
		{out: "etcd Version: 3.5.12\n", want: false},
		{out: "etcd Version: 3.4.31\n", want: true},
		{out: "etcd Version: 3.4.23\nGit SHA: Not provided (use ./build instead of go build)\n", want: false}, // Debian bookworm's
		{out: "etcd Version: 3.6.0-rc.1\n", want: true},
		{out: "Usage: etcd\n", bad: true},
	} {
		v, err := etcdVersion(tc.out)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: read version %s, want an error", tc.out, v)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.out, err)
			continue
		}
		if got := etcdAnswersProgressRequests(v); got != tc.want {
			t.Errorf("etcd %s answers progress requests: %v, want %v", v, got, tc.want)
		}
	}
}
