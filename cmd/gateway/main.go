package main

import (
	_ "github.com/go-chi/chi/v5"
	_ "github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/karmada"
	_ "github.com/karmada-exec-gateway/karmada-exec-gateway/pkg/metrics"
	_ "k8s.io/client-go/dynamic/dynamicinformer"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/metadata/metadatainformer"
	_ "k8s.io/client-go/tools/leaderelection"
	_ "k8s.io/client-go/tools/remotecommand"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/apimachinery/pkg/util/proxy"
	_ "k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	_ "k8s.io/klog/v2"
)

func main() {}
