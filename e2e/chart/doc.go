// Package chart tests the Helm chart in charts/gateway without a cluster: it
// runs bin/helm (built by the hack/helm tools module, or $HELM) `lint` and
// `template` over several value sets, strictly decodes every rendered
// document, and asserts on the objects: Deployment args and security, the
// karmada-apiserver RBAC against the README table, the hook Job, monitoring,
// and that values.schema.json rejects bad values with a clear message. It
// also runs shellcheck on hack/*.sh.
package chart
