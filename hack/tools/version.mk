# The Kubernetes binaries report the version they are built from (kubectl
# version, /version, a Node's kubeletVersion), as released binaries do: Helm
# checks a chart's kubeVersion against the apiserver's, and an unversioned
# build reports v0.0.0-master. kubectl is also linked static (the Makefile):
# the e2e host cluster's hook Job image has no dynamic loader.
KUBE_VERSION := $(shell sed -n 's/^require k8s.io\/kubernetes \(v[^ ]*\).*/\1/p' hack/tools/go.mod)
$(if $(KUBE_VERSION),,$(error hack/tools/go.mod has no 'require k8s.io/kubernetes vX.Y.Z' line to take the version from))
KUBE_VERSION_PARTS := $(subst ., ,$(patsubst v%,%,$(KUBE_VERSION)))
KUBE_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(KUBE_VERSION_PARTS)) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(KUBE_VERSION_PARTS)) \
	-X k8s.io/component-base/version.gitTreeState=clean
