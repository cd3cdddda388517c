package env

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Pod networks come from 198.18.0.0/16, half of 198.18.0.0/15 (RFC 2544,
// reserved for network tests; the other half is the members' Service
// range): one /24 per member, never a range a real network could use, and
// pods get no route beyond it, so their traffic cannot leave the machine.
var podNetworks = netip.MustParsePrefix("198.18.0.0/16")

// serviceNetwork is every apiserver's --service-cluster-ip-range. Nothing
// routes it (there is no kube-proxy); it only must not be a real network.
const serviceNetwork = "198.19.0.0/16"

// netSlots is how many /24s podNetworks holds.
const netSlots = 1 << (24 - 16)

// netLockDir holds one lock file per slot. Several environments run on one
// machine at once (parallel tests, other checkouts): a slot is a member's
// for as long as the process holding the lock lives, and the kernel frees
// it when the process dies, however it dies.
// It is a fixed path, not under TMPDIR, so every environment sees the same
// locks whatever its TMPDIR.
const netLockDir = "/run/karmada-exec-gateway-e2e"

// netSlot is one member's pod network: a /24, the bridge its pods hang on
// and the cgroup its kubelet owns, all named after the slot so that no two
// live environments can share one.
type netSlot struct {
	index int
	lock  *os.File
	// nonce makes the bridge and cgroup names of this claim unique, so that
	// what a test sees after Stop is never the next claim's.
	nonce string
	// netns, if set, is the network namespace the slot's bridge lives in (a
	// Pull-mode member's): it goes with the namespace.
	netns string
}

// claimNetSlot takes the first free slot.
func claimNetSlot() (*netSlot, error) {
	if err := os.MkdirAll(netLockDir, 0o755); err != nil {
		return nil, err
	}
	for i := range netSlots {
		f, err := os.OpenFile(filepath.Join(netLockDir, fmt.Sprintf("slot-%d.lock", i)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return nil, fmt.Errorf("lock pod network slot %d: %w", i, err)
		}
		s := &netSlot{index: i, lock: f, nonce: fmt.Sprintf("%04x", rand.Uint32()&0xffff)}
		if err := s.deleteStaleBridges(); err != nil {
			s.release()
			return nil, err
		}
		s.deleteStaleNetns()
		return s, nil
	}
	return nil, fmt.Errorf("all %d pod network slots of %s are taken", netSlots, podNetworks)
}

func (s *netSlot) release() {
	if s != nil && s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
}

// subnet is the slot's /24.
func (s *netSlot) subnet() netip.Prefix {
	a := podNetworks.Addr().As4()
	a[1] += byte(s.index >> 8)
	a[2] = byte(s.index)
	return netip.PrefixFrom(netip.AddrFrom4(a), 24)
}

// gateway is the host's address on the bridge, the first of the subnet:
// kube-apiserver reaches pods from it (pods/proxy, services/proxy).
func (s *netSlot) gateway() netip.Addr { return s.subnet().Addr().Next() }

// bridgePrefix starts the name of every environment's bridge.
const bridgePrefix = "kegw"

// bridge names the slot's Linux bridge (at most 15 bytes).
func (s *netSlot) bridge() string { return fmt.Sprintf("%s%d-%s", bridgePrefix, s.index, s.nonce) }

// deleteStaleBridges deletes bridges holding the slot's subnet: a free
// slot's subnet on a bridge was left by an environment that died without
// its teardown, and nobody else may use the subnet.
func (s *netSlot) deleteStaleBridges() error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, i := range ifaces {
		if !strings.HasPrefix(i.Name, bridgePrefix) {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && s.subnet().Contains(p.Addr()) {
				if err := ip("link", "del", i.Name); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

// veths are the host ends of the pods' veth pairs on the bridge.
func (s *netSlot) veths() []string {
	if s.netns != "" {
		return nil // inside the namespace, deleted with it
	}
	entries, _ := os.ReadDir(filepath.Join("/sys/class/net", s.bridge(), "brif"))
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// cgroupRoot is the kubelet's cgroupRoot: its pods' cgroups live below it
// and nowhere else, so no kubelet collects another's pods.
func (s *netSlot) cgroupRoot() string { return "/karmada-exec-gateway-e2e-" + s.bridge() }

// createBridge makes the bridge with the gateway address before any pod
// exists: the node has its address from the start, the CNI bridge plugin
// only attaches veths to it (isGateway false, so it changes no sysctl), and
// teardown knows exactly what to delete.
func (s *netSlot) createBridge() error {
	gw := netip.PrefixFrom(s.gateway(), 24).String()
	for _, args := range [][]string{
		{"link", "add", s.bridge(), "type", "bridge"},
		{"addr", "add", gw, "dev", s.bridge()},
		{"link", "set", s.bridge(), "up"},
	} {
		if s.netns != "" {
			args = append([]string{"-n", s.netns}, args...)
		}
		if err := ip(args...); err != nil {
			return err
		}
	}
	return nil
}

func (s *netSlot) deleteBridge() error {
	if s.netns != "" {
		return nil // deleted with the namespace
	}
	if _, err := net.InterfaceByName(s.bridge()); err != nil {
		return nil
	}
	return ip("link", "del", s.bridge())
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// cniConfig is the member's CNI network: a bridge with host-local
// addresses from the slot's /24, no default route and no masquerading.
// containerd adds the loopback network itself.
func (s *netSlot) cniConfig(ipamDir string) ([]byte, error) {
	bridge := map[string]any{
		"type":        "bridge",
		"bridge":      s.bridge(),
		"isGateway":   false,
		"ipMasq":      false,
		"hairpinMode": false,
		"ipam": map[string]any{
			"type":    "host-local",
			"dataDir": ipamDir,
			"ranges":  [][]map[string]string{{{"subnet": s.subnet().String(), "gateway": s.gateway().String()}}},
		},
	}
	return json.MarshalIndent(map[string]any{"cniVersion": "0.4.0", "name": s.bridge(), "plugins": []any{bridge}}, "", "  ")
}
