#!/usr/bin/env bash
# A real Karmada on kind, with the gateway installed by our chart, and the
# executor scenarios run through it. For machines with Docker (Linux: the
# script reaches kind nodes by their container IPs, as Karmada's own
# hack/local-up-karmada.sh does).
#
#   hack/kind-karmada.sh          # up: create or reuse everything, then test
#   hack/kind-karmada.sh test     # only the scenarios, against what is up
#   hack/kind-karmada.sh down     # delete the clusters and the work dir
#
# Every step checks what exists first, so running `up` again converges
# instead of failing. Needs: docker, kind, kubectl, helm, openssl, curl
# (karmadactl is downloaded unless KARMADACTL names one).
set -o errexit -o nounset -o pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK_DIR=${KIND_KARMADA_DIR:-"${REPO_ROOT}/_output/kind-karmada"}
HOST_CLUSTER=${HOST_CLUSTER:-karmada-host}
read -r -a MEMBERS <<<"${MEMBER_CLUSTERS:-member1 member2}"
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-}
KARMADA_VERSION=${KARMADA_VERSION:-v1.16.0}
KARMADA_NODEPORT=${KARMADA_NODEPORT:-32443}
GATEWAY_IMAGE=${GATEWAY_IMAGE:-karmada-exec-gateway:kind}
GATEWAY_RELEASE=${GATEWAY_RELEASE:-exec-gateway}
AUTH_MODE=${AUTH_MODE:-authorize}
GATEWAY_LOCAL_PORT=${GATEWAY_LOCAL_PORT:-18443}
TEST_NS=${TEST_NS:-kind-e2e}

KUBECTL=${KUBECTL:-$(command -v kubectl || echo "${REPO_ROOT}/bin/kubectl")}
HELM=${HELM:-$(command -v helm || echo "${REPO_ROOT}/bin/helm")}
KARMADACTL=${KARMADACTL:-"${WORK_DIR}/bin/karmadactl"}

KARMADA_DATA="${WORK_DIR}/karmada"
KARMADA_CONFIG="${KARMADA_DATA}/karmada-apiserver.config"
HOST_CONFIG="${WORK_DIR}/${HOST_CLUSTER}.config"
FULLNAME="${GATEWAY_RELEASE}-karmada-exec-gateway"
if [[ ${GATEWAY_RELEASE} == *karmada-exec-gateway* ]]; then
	FULLNAME=${GATEWAY_RELEASE}
fi

log() { printf '\n==> %s\n' "$*" >&2; }
die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

need() {
	local tool
	for tool in "$@"; do
		command -v "${tool}" >/dev/null 2>&1 || [[ -x ${tool} ]] || die "${tool} is required"
	done
}

# Helpers for each API server.
host() { "${KUBECTL}" --kubeconfig "${HOST_CONFIG}" "$@"; }
karmada() { "${KUBECTL}" --kubeconfig "${KARMADA_CONFIG}" "$@"; }
member() {
	local name=$1
	shift
	"${KUBECTL}" --kubeconfig "${WORK_DIR}/${name}.config" "$@"
}

cluster_exists() { kind get clusters 2>/dev/null | grep -qx "$1"; }

container_ip() {
	docker inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1-control-plane"
}

create_cluster() {
	local name=$1
	if cluster_exists "${name}"; then
		log "kind cluster ${name} exists"
	else
		log "creating kind cluster ${name}"
		local args=(create cluster --name "${name}" --wait 120s)
		[[ -n ${KIND_NODE_IMAGE} ]] && args+=(--image "${KIND_NODE_IMAGE}")
		kind "${args[@]}"
	fi
	# A kubeconfig that works from this machine and from inside the other
	# clusters: the node's container IP, which kind puts in the cert's SANs.
	kind get kubeconfig --name "${name}" >"${WORK_DIR}/${name}.config"
	"${KUBECTL}" --kubeconfig "${WORK_DIR}/${name}.config" config set-cluster "kind-${name}" \
		--server "https://$(container_ip "${name}"):6443" >/dev/null
}

install_karmadactl() {
	if [[ -x ${KARMADACTL} ]]; then
		return
	fi
	log "downloading karmadactl ${KARMADA_VERSION}"
	local os arch
	os=$(uname -s | tr '[:upper:]' '[:lower:]')
	arch=$(uname -m)
	case ${arch} in
	x86_64) arch=amd64 ;;
	aarch64 | arm64) arch=arm64 ;;
	*) die "unsupported architecture ${arch}" ;;
	esac
	mkdir -p "$(dirname "${KARMADACTL}")"
	curl -fsSL "https://github.com/karmada-io/karmada/releases/download/${KARMADA_VERSION}/karmadactl-${os}-${arch}.tgz" |
		tar -xz -C "$(dirname "${KARMADACTL}")" karmadactl
}

install_karmada() {
	if [[ -s ${KARMADA_CONFIG} ]] && host -n karmada-system get deployment karmada-apiserver >/dev/null 2>&1; then
		log "Karmada is installed in ${HOST_CLUSTER}"
	else
		log "installing Karmada ${KARMADA_VERSION} into ${HOST_CLUSTER} (karmadactl init)"
		mkdir -p "${KARMADA_DATA}"
		"${KARMADACTL}" init \
			--kubeconfig "${HOST_CONFIG}" \
			--karmada-data "${KARMADA_DATA}" \
			--karmada-pki "${KARMADA_DATA}/pki" \
			--port "${KARMADA_NODEPORT}" \
			--etcd-storage-mode emptyDir \
			--cert-external-ip "$(container_ip "${HOST_CLUSTER}"),127.0.0.1" \
			--cert-external-dns localhost
	fi
	karmada wait --for=condition=Established --timeout=120s \
		crd/clusters.cluster.karmada.io crd/propagationpolicies.policy.karmada.io \
		crd/clusterpropagationpolicies.policy.karmada.io \
		crd/resourceinterpretercustomizations.config.karmada.io >/dev/null
}

join_members() {
	local m
	for m in "${MEMBERS[@]}"; do
		if karmada get clusters.cluster.karmada.io "${m}" >/dev/null 2>&1; then
			log "${m} is joined"
		else
			log "joining ${m} (push mode)"
			"${KARMADACTL}" join "${m}" --kubeconfig "${KARMADA_CONFIG}" \
				--cluster-kubeconfig "${WORK_DIR}/${m}.config" --cluster-context "kind-${m}"
		fi
	done
	for m in "${MEMBERS[@]}"; do
		karmada wait --for=condition=Ready --timeout=180s "clusters.cluster.karmada.io/${m}" >/dev/null
	done
}

build_image() {
	log "building ${GATEWAY_IMAGE} and loading it into ${HOST_CLUSTER}"
	docker build -t "${GATEWAY_IMAGE}" "${REPO_ROOT}"
	kind load docker-image "${GATEWAY_IMAGE}" --name "${HOST_CLUSTER}"
}

# The gateway gets an identity of its own in karmada-apiserver (a
# ServiceAccount token); the hook Job applies RBAC with Karmada's admin
# kubeconfig, since the gateway's identity may not create ClusterRoles.
gateway_secrets() {
	log "kubeconfig and serving certificate Secrets for the gateway"
	local in_cluster="https://karmada-apiserver.karmada-system.svc.cluster.local:5443"
	local ca token
	ca=$(karmada config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
	karmada create namespace karmada-system --dry-run=client -o yaml | karmada apply -f - >/dev/null
	karmada -n karmada-system create serviceaccount karmada-exec-gateway --dry-run=client -o yaml |
		karmada apply -f - >/dev/null
	token=$(karmada -n karmada-system create token karmada-exec-gateway --duration 720h)
	local kc="${WORK_DIR}/gateway.kubeconfig"
	cat >"${kc}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: karmada
  cluster:
    server: ${in_cluster}
    certificate-authority-data: ${ca}
users:
- name: karmada-exec-gateway
  user:
    token: ${token}
contexts:
- name: karmada
  context: {cluster: karmada, user: karmada-exec-gateway}
current-context: karmada
EOF
	host -n karmada-system create secret generic karmada-exec-gateway-kubeconfig \
		--from-file=kubeconfig="${kc}" --dry-run=client -o yaml | host apply -f - >/dev/null
	# The admin kubeconfig, pointed at the in-cluster Service, for the hook Job.
	local admin="${WORK_DIR}/karmada-admin.kubeconfig"
	karmada config view --raw --minify >"${admin}"
	"${KUBECTL}" --kubeconfig "${admin}" config set-cluster \
		"$("${KUBECTL}" --kubeconfig "${admin}" config view -o jsonpath='{.clusters[0].name}')" \
		--server "${in_cluster}" >/dev/null
	host -n karmada-system create secret generic karmada-exec-gateway-admin-kubeconfig \
		--from-file=kubeconfig="${admin}" --dry-run=client -o yaml | host apply -f - >/dev/null

	local pki="${WORK_DIR}/gateway-pki"
	if [[ ! -s ${pki}/tls.crt ]]; then
		mkdir -p "${pki}"
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
			-subj "/CN=karmada-exec-gateway-ca" -keyout "${pki}/ca.key" -out "${pki}/ca.crt" 2>/dev/null
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
			-subj "/CN=${FULLNAME}" -keyout "${pki}/tls.key" -out "${pki}/tls.csr" 2>/dev/null
		printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,DNS:%s,DNS:%s.karmada-system.svc,DNS:%s.karmada-system.svc.cluster.local\nextendedKeyUsage=serverAuth\n' \
			"${FULLNAME}" "${FULLNAME}" "${FULLNAME}" >"${pki}/ext.cnf"
		openssl x509 -req -in "${pki}/tls.csr" -CA "${pki}/ca.crt" -CAkey "${pki}/ca.key" \
			-CAcreateserial -days 30 -extfile "${pki}/ext.cnf" -out "${pki}/tls.crt" 2>/dev/null
	fi
	host -n karmada-system create secret tls "${FULLNAME}-tls" \
		--cert "${pki}/tls.crt" --key "${pki}/tls.key" --dry-run=client -o yaml | host apply -f - >/dev/null
}

install_chart() {
	log "installing the chart (auth mode ${AUTH_MODE})"
	local repo=${GATEWAY_IMAGE%:*} tag=${GATEWAY_IMAGE##*:}
	"${HELM}" --kubeconfig "${HOST_CONFIG}" upgrade --install "${GATEWAY_RELEASE}" \
		"${REPO_ROOT}/charts/gateway" --namespace karmada-system \
		--set image.repository="${repo}" --set image.tag="${tag}" --set image.pullPolicy=Never \
		--set auth.mode="${AUTH_MODE}" \
		--set karmada.kubeconfigSecret.name=karmada-exec-gateway-kubeconfig \
		--set karmada.identity.user= \
		--set karmada.identity.serviceAccount.name=karmada-exec-gateway \
		--set karmada.identity.serviceAccount.namespace=karmada-system \
		--set karmadaResources.job.kubeconfigSecret.name=karmada-exec-gateway-admin-kubeconfig \
		--set karmadaResources.job.kubeconfigSecret.key=kubeconfig \
		--wait --timeout 5m
	host -n karmada-system rollout status "deployment/${FULLNAME}" --timeout=180s
}

# A CI caller: a ServiceAccount in karmada-apiserver with the pod RBAC an
# executor has today. passthrough mode also needs clusters/proxy and member
# RBAC for it (README: "Auth modes and the RBAC each needs").
caller_setup() {
	karmada create namespace "${TEST_NS}" --dry-run=client -o yaml | karmada apply -f - >/dev/null
	karmada apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: ci-runner, namespace: ${TEST_NS}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: ci-runner, namespace: ${TEST_NS}}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [pods/exec, pods/attach, pods/portforward]
  verbs: [get, create]
- apiGroups: [""]
  resources: [pods/log, events]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ci-runner, namespace: ${TEST_NS}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ci-runner}
subjects:
- {kind: ServiceAccount, name: ci-runner, namespace: ${TEST_NS}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: ci-pods, namespace: ${TEST_NS}}
spec:
  propagateDeps: true
  resourceSelectors:
  - {apiVersion: v1, kind: Pod}
  placement:
    clusterAffinity:
      clusterNames: [$(printf '%s,' "${MEMBERS[@]}" | sed 's/,$//')]
    spreadConstraints:
    - {spreadByField: cluster, maxGroups: 1, minGroups: 1}
EOF
	if [[ ${AUTH_MODE} == passthrough ]]; then
		karmada apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ci-runner-cluster-proxy}
rules:
- apiGroups: [cluster.karmada.io]
  resources: [clusters/proxy]
  verbs: [get, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ci-runner-cluster-proxy}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ci-runner-cluster-proxy}
subjects:
- {kind: ServiceAccount, name: ci-runner, namespace: ${TEST_NS}}
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:serviceaccounts}
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:serviceaccounts:${TEST_NS}"}
EOF
		local m
		for m in "${MEMBERS[@]}"; do
			member "${m}" create namespace "${TEST_NS}" --dry-run=client -o yaml | member "${m}" apply -f - >/dev/null
			member "${m}" -n "${TEST_NS}" create role ci-runner --verb=get,create \
				--resource=pods/exec,pods/attach,pods/portforward,pods/log --dry-run=client -o yaml | member "${m}" apply -f - >/dev/null
			member "${m}" -n "${TEST_NS}" create rolebinding ci-runner --role=ci-runner \
				--user="system:serviceaccount:${TEST_NS}:ci-runner" --dry-run=client -o yaml | member "${m}" apply -f - >/dev/null
		done
	fi
}

PIDS=()
cleanup_pids() {
	local p
	for p in "${PIDS[@]}"; do
		kill "${p}" 2>/dev/null || true
	done
}

wait_port() {
	local port=$1 i
	for ((i = 0; i < 60; i++)); do
		if (: <"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; then
			return 0
		fi
		sleep 1
	done
	die "nothing listens on 127.0.0.1:${port}"
}

# The scenarios an executor runs, with kubectl through the gateway: create a
# pod template, wait for Ready (needs the Pod status interpreter), exec,
# attach-free logs, cp (exec tar) and port-forward.
run_scenarios() {
	log "running the scenarios through the gateway"
	trap cleanup_pids EXIT
	caller_setup
	host -n karmada-system port-forward "svc/${FULLNAME}" "${GATEWAY_LOCAL_PORT}:443" >"${WORK_DIR}/port-forward.log" 2>&1 &
	PIDS+=($!)
	wait_port "${GATEWAY_LOCAL_PORT}"

	local gw="${WORK_DIR}/ci-runner.gateway.kubeconfig" token
	token=$(karmada -n "${TEST_NS}" create token ci-runner --duration 1h)
	"${KUBECTL}" --kubeconfig "${gw}" config set-cluster gateway --server "https://127.0.0.1:${GATEWAY_LOCAL_PORT}" \
		--certificate-authority "${WORK_DIR}/gateway-pki/ca.crt" --embed-certs >/dev/null
	"${KUBECTL}" --kubeconfig "${gw}" config set-credentials ci-runner --token "${token}" >/dev/null
	"${KUBECTL}" --kubeconfig "${gw}" config set-context gateway --cluster gateway --user ci-runner --namespace "${TEST_NS}" >/dev/null
	"${KUBECTL}" --kubeconfig "${gw}" config use-context gateway >/dev/null
	ci() { "${KUBECTL}" --kubeconfig "${gw}" "$@"; }

	ci delete pod job-1 --ignore-not-found --wait=true >/dev/null
	ci apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: job-1}
spec:
  restartPolicy: Never
  containers:
  - name: build
    image: busybox:1.36
    command: [sh, -c, 'echo job-started; mkdir -p /www; echo served > /www/index.html; exec httpd -f -p 8080 -h /www']
EOF
	ci wait --for=condition=Ready pod/job-1 --timeout=180s
	local out
	out=$(ci exec job-1 -c build -- sh -c 'echo exec-ok')
	[[ ${out} == exec-ok ]] || die "exec printed '${out}'"
	KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false ci exec job-1 -c build -- true
	ci logs job-1 -c build | grep -qx job-started || die "logs lack the job's output"
	printf 'artifact\n' >"${WORK_DIR}/artifact.txt"
	ci cp "${WORK_DIR}/artifact.txt" job-1:/tmp/artifact.txt -c build
	[[ $(ci exec job-1 -c build -- cat /tmp/artifact.txt) == artifact ]] || die "cp did not arrive"
	ci port-forward pod/job-1 18080:8080 >"${WORK_DIR}/pf-pod.log" 2>&1 &
	PIDS+=($!)
	wait_port 18080
	[[ $(curl -fsS http://127.0.0.1:18080/) == served ]] || die "port-forward did not reach the pod"
	ci delete pod job-1 --wait=false
	log "all scenarios passed (auth mode ${AUTH_MODE})"
}

up() {
	need docker kind "${KUBECTL}" "${HELM}" openssl curl
	mkdir -p "${WORK_DIR}"
	create_cluster "${HOST_CLUSTER}"
	local m
	for m in "${MEMBERS[@]}"; do
		create_cluster "${m}"
	done
	install_karmadactl
	install_karmada
	join_members
	build_image
	gateway_secrets
	install_chart
	run_scenarios
	log "done. karmada-apiserver: ${KARMADA_CONFIG}; through the gateway: ${WORK_DIR}/ci-runner.gateway.kubeconfig (after: kubectl --kubeconfig ${HOST_CONFIG} -n karmada-system port-forward svc/${FULLNAME} ${GATEWAY_LOCAL_PORT}:443)"
}

down() {
	need kind
	local c
	for c in "${HOST_CLUSTER}" "${MEMBERS[@]}"; do
		if cluster_exists "${c}"; then
			log "deleting kind cluster ${c}"
			kind delete cluster --name "${c}"
		fi
	done
	rm -rf "${WORK_DIR}"
}

case ${1:-up} in
up) up ;;
test)
	need "${KUBECTL}" curl
	run_scenarios
	;;
down) down ;;
*) die "usage: $0 [up|test|down]" ;;
esac
