package env

import (
	"bufio"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/e2e/images"
)

// TestReadChartImages: the host cluster's images are tagged as the chart's
// defaults name them: make image's repository at the appVersion, and the
// hook Job's kubectl.
func TestReadChartImages(t *testing.T) {
	root, err := FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	refs, err := readChartImages(filepath.Join(root, "charts", "gateway"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(refs.Gateway, images.GatewayRepository+":") || strings.HasSuffix(refs.Gateway, ":") {
		t.Errorf("gateway image %q, want %s:<appVersion>", refs.Gateway, images.GatewayRepository)
	}
	if !strings.Contains(refs.Kubectl, "kubectl:v") {
		t.Errorf("hook Job image %q, want a kubectl:v<version>", refs.Kubectl)
	}
	if _, err := readChartImages(t.TempDir()); err == nil {
		t.Error("readChartImages of a directory without a chart succeeded")
	}
}

// TestForwarder: bytes go both ways unchanged, a half-close reaches the
// target, and close cuts relayed connections and stops listening.
func TestForwarder(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					_, _ = c.Write([]byte("echo " + sc.Text() + "\n"))
				}
				_, _ = c.Write([]byte("eof\n")) // the client's half-close arrived
			}()
		}
	}()
	f, err := listenForwarder(netip.MustParseAddrPort("127.0.0.1:0"), target.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", f.addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "echo hello\n" {
		t.Fatalf("relayed answer %q, %v", line, err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "eof\n" {
		t.Fatalf("after a half-close: %q, %v", line, err)
	}

	open, err := net.Dial("tcp", f.addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if _, err := open.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(open).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	f.close()
	if !f.isClosed() {
		t.Error("isClosed after close is false")
	}
	if _, err := bufio.NewReader(open).ReadString('\n'); err == nil {
		t.Error("a relayed connection survived close")
	}
	if c, err := net.Dial("tcp", f.addr().String()); err == nil {
		c.Close()
		t.Error("the forwarder still accepts after close")
	}
}
