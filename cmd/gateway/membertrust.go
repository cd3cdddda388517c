package main

import (
	"context"
	"flag"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	"github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/membertrust"
)

// defaultMemberTrustSecret is where the chart's release named
// karmada-exec-gateway publishes.
const defaultMemberTrustSecret = "karmada-cluster/karmada-exec-gateway-member-trust"

// memberTrustCommand names the subcommand that runs pkg/membertrust alone,
// with an identity of its own: `gateway member-trust [flags]`.
const memberTrustCommand = "member-trust"

type memberTrustOptions struct {
	kubeconfig  string
	secret      string
	resync      time.Duration
	callTimeout time.Duration
}

func bindMemberTrustFlags(fs *flag.FlagSet) *memberTrustOptions {
	o := &memberTrustOptions{}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of karmada-apiserver, an identity that may read the Secrets the Clusters name and write --member-trust-secret (not the gateway's); empty uses the in-cluster config")
	fs.StringVar(&o.secret, "member-trust-secret", defaultMemberTrustSecret, "namespace/name of the Secret each Cluster's impersonator token and CA are published in, for gateways with --member-access=direct")
	fs.DurationVar(&o.resync, "resync-period", 10*time.Minute, "informer resync period")
	fs.DurationVar(&o.callTimeout, "kube-api-timeout", membertrust.DefaultCallTimeout, "time karmada-apiserver has to answer each read or write of the published Secret")
	return o
}

// parseSecretName reads a namespace/name flag value.
func parseSecretName(flagName, v string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return types.NamespacedName{}, fmt.Errorf("%s must be namespace/name, not %q", flagName, v)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// memberTrustMain runs `gateway member-trust` with args, until SIGTERM.
func memberTrustMain(args []string) int {
	fs := flag.NewFlagSet(memberTrustCommand, flag.ExitOnError)
	flag.CommandLine.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) }) // klog's
	o := bindMemberTrustFlags(fs)
	_ = fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runMemberTrust(ctx, o); err != nil {
		klog.ErrorS(err, "member-trust failed")
		klog.Flush()
		return 1
	}
	klog.Flush()
	return 0
}

func runMemberTrust(ctx context.Context, o *memberTrustOptions) error {
	published, err := parseSecretName("--member-trust-secret", o.secret)
	if err != nil {
		return err
	}
	cfg, err := upstreamConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	// No client timeout: the Secret informers' watches must not get one;
	// the controller bounds each read and write of the published Secret.
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	clusters := karmada.NewClusterInformer(dyn, o.resync)
	c, err := membertrust.New(membertrust.Options{Clusters: clusters, Client: kube, Published: published, Resync: o.resync, CallTimeout: o.callTimeout})
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Publishing the members' impersonator tokens and CAs", "secret", published.String())
	go clusters.Run(ctx.Done())
	return c.Run(ctx)
}
