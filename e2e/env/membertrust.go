package env

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// MemberTrustSecret is where the environment's member-trust process
// publishes the members' impersonator tokens and CAs: the Secret the
// chart's release karmada-exec-gateway names, and the gateway's
// --member-trust-secret default.
const MemberTrustSecret = "karmada-exec-gateway-member-trust"

// startMemberTrust runs `gateway member-trust` as UserMemberTrust, whose
// RBAC is the chart's, as the chart's member-trust Deployment runs it, and
// waits for its first publication: a gateway with --member-access=direct
// reads only that Secret, as its chart RBAC allows. It runs until Stop.
func (e *Env) startMemberTrust(ctx context.Context) error {
	e.gwMu.Lock()
	if e.gatewayBin == "" {
		if err := e.buildGateway(ctx); err != nil {
			e.gwMu.Unlock()
			return err
		}
	}
	e.memberTrust = &process{name: "member-trust", path: e.gatewayBin, logPath: filepath.Join(e.logDir, "member-trust.log"),
		args: []string{"member-trust", "--kubeconfig=" + e.Kubeconfig(UserMemberTrust), "-v=2"}}
	proc := e.memberTrust
	e.gwMu.Unlock()
	if err := proc.start(); err != nil {
		return err
	}
	admin, err := e.KarmadaClient(UserAdmin)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if !proc.running() {
			return false, proc.exitErr()
		}
		_, err := admin.CoreV1().Secrets(KarmadaCluster).Get(ctx, MemberTrustSecret, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("member-trust published nothing in %s/%s: %w", KarmadaCluster, MemberTrustSecret, err)
	}
	return nil
}
