package identity

import (
	"net/http"
	"reflect"
	"testing"
)

// TestPlainRequestHeader: a plain request on a caller's behalf carries the
// caller's bearer token as Authorization, taken from a WebSocket bearer
// subprotocol only when Authorization has none, and no WebSocket header.
func TestPlainRequestHeader(t *testing.T) {
	const wsToken = "base64url.bearer.authorization.k8s.io.d3MtdG9rZW4" // "ws-token"
	upgrade := func(protocols string) http.Header {
		return http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {protocols}, "Sec-Websocket-Key": {"k"}}
	}
	tests := []struct {
		name    string
		orig    http.Header
		want    http.Header
		wantErr bool
	}{
		{"plain bearer kept", http.Header{"Authorization": {"Bearer a"}}, http.Header{"Authorization": {"Bearer a"}}, false},
		{"websocket token as Authorization", upgrade("v5.channel.k8s.io, " + wsToken), http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Authorization": {"Bearer ws-token"}}, false},
		{"Authorization wins over the subprotocol", func() http.Header {
			h := upgrade("v5.channel.k8s.io, " + wsToken)
			h.Set("Authorization", "Bearer a")
			return h
		}(), http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Authorization": {"Bearer a"}}, false},
		{"token without another subprotocol", upgrade(wsToken), nil, true},
		{"nothing to carry", http.Header{}, http.Header{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			edit, err := PlainRequestHeader(tt.orig)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			got := tt.orig.Clone()
			edit(got)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("header = %v, want %v", got, tt.want)
			}
		})
	}
}
