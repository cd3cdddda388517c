package env

import (
	"strings"
	"testing"
)

// TestTinyproxyConfig checks the proxy a Pull member is reached through:
// it listens only on the namespace end of the link, admits only the host
// end, lets CONNECT reach any port (tinyproxy allows every port only when
// no ConnectPort line is given; Debian's default file restricts to 443 and
// 563, which would refuse an apiserver's port) and keeps idle tunnels open
// longer than any test's silent exec or watch.
func TestTinyproxyConfig(t *testing.T) {
	p := &pullMember{name: "member1", link: &netSlot{index: 7}, proxyPort: 40123}
	conf := tinyproxyConfig(p, "/logs/tinyproxy.log")
	for _, want := range []string{"Port 40123\n", "Listen 198.18.7.2\n", "Allow 198.18.7.1\n", "Timeout 3600\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("tinyproxy config lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "ConnectPort") {
		t.Errorf("tinyproxy config restricts CONNECT ports:\n%s", conf)
	}
	if got := p.proxyURL().String(); got != "http://198.18.7.2:40123" {
		t.Errorf("proxyURL = %s, want http://198.18.7.2:40123", got)
	}
}

// TestDantedConfig checks the SOCKS5 proxy (Options.PullProxies "socks5") as
// TestTinyproxyConfig the HTTP one: Debian's danted, listening only on the
// namespace end, admitting only the host end, CONNECT only to the
// namespace's loopback, no authentication and no idle timeout.
func TestDantedConfig(t *testing.T) {
	p := &pullMember{name: "member1", link: &netSlot{index: 7}, proxyPort: 40123, proxyScheme: "socks5"}
	conf := dantedConfig(p, "/logs/danted.log")
	for _, want := range []string{"internal: 198.18.7.2 port = 40123\n", "from: 198.18.7.1/32 to: 0.0.0.0/0\n", "from: 198.18.7.1/32 to: 127.0.0.1/32\n",
		"command: connect\n", "socksmethod: none\n", "timeout.io: 0\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("danted config lacks %q:\n%s", want, conf)
		}
	}
	if got := p.proxyURL().String(); got != "socks5://198.18.7.2:40123" {
		t.Errorf("proxyURL = %s, want socks5://198.18.7.2:40123", got)
	}
}
