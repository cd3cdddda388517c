package identity

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/identity/identitytest"
)

func TestStripHeaders(t *testing.T) {
	in := http.Header{
		"Authorization":                {"Bearer x"},
		"authorization":                {"Bearer y"},
		"Impersonate-User":             {"bob"},
		"impersonate-user":             {"bob"},
		"IMPERSONATE-GROUP":            {"system:masters"},
		"Impersonate-Uid":              {"1"},
		"Impersonate-Extra-Foo":        {"bar"},
		"impersonate-extra-scopes%2fx": {"y"},
		"Impersonate-Future-Thing":     {"z"},
		"Impersonate-":                 {"z"},
		"X-Remote-User":                {"admin"},
		"x-remote-group":               {"system:masters"},
		"X-Remote-Extra-Scopes":        {"all"},
		"Sec-Websocket-Protocol":       {"base64url.bearer.authorization.k8s.io.dG9rZW4, v5.channel.k8s.io", "v4.channel.k8s.io"},
		"Content-Type":                 {"application/json"},
		"X-Impersonate-User":           {"kept"},
		"Authorization-Hint":           {"kept"},
		"Impersonate":                  {"kept"},
		"X-Stream-Protocol-Version":    {"v4.channel.k8s.io", "channel.k8s.io"},
	}
	StripHeaders(in)
	want := http.Header{
		"Sec-Websocket-Protocol":    {"v5.channel.k8s.io", "v4.channel.k8s.io"},
		"Content-Type":              {"application/json"},
		"X-Impersonate-User":        {"kept"},
		"Authorization-Hint":        {"kept"},
		"Impersonate":               {"kept"},
		"X-Stream-Protocol-Version": {"v4.channel.k8s.io", "channel.k8s.io"},
	}
	if !reflect.DeepEqual(in, want) {
		t.Errorf("after strip = %v, want %v", in, want)
	}
}

func FuzzStripHeaders(f *testing.F) {
	f.Add("impersonate-user", "bob", "Impersonate-Extra-Foo", "bar", "authorization")
	f.Add("IMPERSONATE-GROUP", "system:masters", "impersonate-uid", "0", "AUTHORIZATION")
	f.Add("Impersonate-Extra-a%2Fb", "x", "X-Impersonate-User", "kept", "Content-Type")
	f.Add("iMpErSoNaTe-", "", "authorization ", "x", "Impersonate")
	f.Add("Authorization", "Bearer t", "imperſonate-user", "unicode s", "Impersonate-Extra-")
	f.Add("X-Remote-User", "admin", "x-remote-extra-a", "b", "X-Remote-Group")
	f.Add("X-Remote-", "", "x-remote-custom-user", "admin", "X-REMOTE-UID")
	f.Fuzz(func(t *testing.T, rawKey, rawValue, addKey, addValue, nilKey string) {
		h := http.Header{"X-Keep": {"1"}}
		h[rawKey] = append(h[rawKey], rawValue)
		h.Add(addKey, addValue)
		h[nilKey] = nil
		before := map[string]bool{}
		for k := range h {
			before[k] = true
		}
		StripHeaders(h)
		for k := range before {
			if _, kept := h[k]; kept && identitytest.IsIdentityHeader(k) {
				t.Errorf("identity header %q survived", k)
			}
		}
		if _, kept := h["X-Keep"]; !kept {
			t.Error("X-Keep, not an identity header, was stripped")
		}
		if h.Get("Authorization") != "" {
			t.Error("Authorization survived")
		}
	})
}
