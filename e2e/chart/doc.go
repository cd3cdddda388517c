// Package chart tests the Helm chart in charts/gateway without a cluster: it
// runs bin/helm (built from the hack/tools module, or $HELM) `lint` and
// `template` over several value sets, strictly decodes every rendered
// document, and asserts on the objects: Deployment args and security, the
// karmada-apiserver RBAC against the README table, the hook Job, monitoring,
// and that values.schema.json rejects bad values with a clear message;
// README's Helm commands as far as they go without a cluster (the TLS Secret
// it creates is the one the release mounts; its helm template of the
// karmada-apiserver objects renders them) and its PropagationPolicies. It
// also runs shellcheck on hack/*.sh.
package chart
