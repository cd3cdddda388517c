{{/*
The objects that live in karmada-apiserver, not in the host cluster: the
gateway identity's RBAC, the Pod status interpreter and, in authorize mode, the
member-cluster RBAC with the ClusterPropagationPolicy that sends it to every
member. target=host ships them in a ConfigMap for the hook Job;
target=karmadaApiserver renders them as release resources.
*/}}
{{- define "gateway.karmadaRBAC" -}}
{{- $name := include "gateway.fullname" . -}}
{{- $authorize := eq .Values.auth.mode "authorize" -}}
{{- $direct := eq .Values.memberAccess.mode "direct" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "gateway.labels" . | nindent 4 }}
rules:
  # resolver cache; the labeler's label patch
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list, watch, patch]
  # placement
  - apiGroups: [work.karmada.io]
    resources: [resourcebindings]
    verbs: [get, list, watch]
  # cluster readiness
  - apiGroups: [cluster.karmada.io]
    resources: [clusters]
    verbs: [get, list, watch]
  {{- if .Values.serviceProxy.enabled }}
  # services/proxy routing: a Service's selector
  - apiGroups: [""]
    resources: [services]
    verbs: [get, list, watch]
  {{- end }}
  # the startup check that warns when pod status is not kept faithfully
  - apiGroups: [config.karmada.io]
    resources: [resourceinterpretercustomizations]
    verbs: [list]
{{- if or $authorize $direct }}
  # authorize mode, and direct member access (which judges passthrough
  # callers as karmada-apiserver's cluster proxy would): authenticate and
  # authorize callers
  - apiGroups: [authentication.k8s.io]
    resources: [tokenreviews]
    verbs: [create]
  - apiGroups: [authorization.k8s.io]
    resources: [subjectaccessreviews]
    verbs: [create]
{{- end }}
{{- if $authorize }}
{{- if .Values.auth.clientCA.secretName }}
  # authorize mode with client certificates: non-pod routes go upstream as the caller
  - apiGroups: [""]
    resources: [users, groups]
    verbs: [impersonate]
  # Every UID and extra: a certificate caller always carries the extra
  # authentication.kubernetes.io/credential-id, and one allowed to impersonate
  # carries whatever it impersonates. RBAC matches userextras/<key> exactly;
  # "userextras/*" would match only a key named "*".
  - apiGroups: [authentication.k8s.io]
    resources: ["*"]
    verbs: [impersonate]
{{- end }}
{{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "gateway.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  {{- include "gateway.identitySubjects" . | indent 2 }}
{{- if $authorize }}
---
# authorize mode: the gateway calls the cluster proxy as itself. A binding of
# its own, because a ServiceAccount identity also needs its groups listed here
# (see gateway.serviceAccountGroupSubjects): every ServiceAccount then gets
# clusters/proxy, which lets it act in a member only with the RBAC its own
# identity has there.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}-cluster-proxy
  labels:
    {{- include "gateway.labels" . | nindent 4 }}
rules:
  # karmada-apiserver derives the verb from the method, and pods/proxy (and
  # services/proxy) forward every method the caller was authorized for:
  # PUT is update, PATCH patch, DELETE delete, as in the member RBAC.
  - apiGroups: [cluster.karmada.io]
    resources: [clusters/proxy]
    verbs: [get, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}-cluster-proxy
  labels:
    {{- include "gateway.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}-cluster-proxy
subjects:
  {{- include "gateway.identitySubjects" . | indent 2 }}
  {{- include "gateway.serviceAccountGroupSubjects" . | indent 2 }}
{{- end }}
{{- if $direct }}
{{- $trust := .Values.memberAccess.memberTrust }}
{{- $published := printf "%s-member-trust" $name }}
---
# direct member access: where member-trust publishes the members' impersonator
# tokens and CAs. Rendered empty (member-trust writes its data), so that
# uninstalling removes the copy with the release.
apiVersion: v1
kind: Secret
metadata:
  name: {{ $published }}
  namespace: {{ $trust.secretNamespace }}
  labels:
    {{- include "gateway.labels" $ | nindent 4 }}
type: Opaque
---
# direct member access: the gateway reads one Secret, by name: the members'
# impersonator tokens and CAs that the member-trust Deployment publishes. Never
# the Secrets the Clusters name, whose secretRef one holds a member
# ServiceAccount's cluster-admin token beside the CA.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}-member-trust-secret
  namespace: {{ $trust.secretNamespace }}
  labels:
    {{- include "gateway.labels" $ | nindent 4 }}
rules:
  # list and watch by name: an informer with a metadata.name field selector
  - apiGroups: [""]
    resources: [secrets]
    resourceNames: [{{ $published }}]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}-member-trust-secret
  namespace: {{ $trust.secretNamespace }}
  labels:
    {{- include "gateway.labels" $ | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}-member-trust-secret
subjects:
  {{- include "gateway.identitySubjects" $ | indent 2 }}
---
# member-trust follows the Clusters, reads the Secrets they name and publishes
# their tokens and CAs (the Roles below).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}-member-trust
  labels:
    {{- include "gateway.labels" $ | nindent 4 }}
rules:
  - apiGroups: [cluster.karmada.io]
    resources: [clusters]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}-member-trust
  labels:
    {{- include "gateway.labels" $ | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}-member-trust
subjects:
  {{- include "gateway.subjectsOf" $trust.identity | indent 2 }}
{{- range .Values.memberAccess.secretNamespaces }}
---
# member-trust reads the Secrets the Clusters name in {{ . }} (never Secrets
# cluster-wide).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}-member-trust-read
  namespace: {{ . }}
  labels:
    {{- include "gateway.labels" $ | nindent 4 }}
rules:
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}-member-trust-read
  namespace: {{ . }}
  labels:
    {{- include "gateway.labels" $ | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}-member-trust-read
subjects:
  {{- include "gateway.subjectsOf" $trust.identity | indent 2 }}
{{- end }}
---
# member-trust publishes the tokens and CAs (a create cannot be narrowed to a name).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}-member-trust-publish
  namespace: {{ $trust.secretNamespace }}
  labels:
    {{- include "gateway.labels" $ | nindent 4 }}
rules:
  - apiGroups: [""]
    resources: [secrets]
    verbs: [create]
  - apiGroups: [""]
    resources: [secrets]
    resourceNames: [{{ $published }}]
    verbs: [get, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}-member-trust-publish
  namespace: {{ $trust.secretNamespace }}
  labels:
    {{- include "gateway.labels" $ | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}-member-trust-publish
subjects:
  {{- include "gateway.subjectsOf" $trust.identity | indent 2 }}
{{- end }}
{{- if include "gateway.leaseNeeded" . }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}-leader-election
  namespace: {{ .Values.labeler.leaderElection.namespace }}
  labels:
    {{- include "gateway.labels" . | nindent 4 }}
rules:
  # labeler leader election
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}-leader-election
  namespace: {{ .Values.labeler.leaderElection.namespace }}
  labels:
    {{- include "gateway.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}-leader-election
subjects:
  {{- include "gateway.identitySubjects" . | indent 2 }}
{{- end }}
{{- end -}}

{{/* Member-cluster RBAC (authorize mode): templates in karmada-apiserver, propagated to every member. */}}
{{- define "gateway.memberRBAC" -}}
{{- $name := printf "%s-member" (include "gateway.fullname" .) -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "gateway.labels" . | nindent 4 }}
rules:
  # Before acting as itself on a member object, the gateway reads its metadata
  # to check it is the template's own copy (Karmada's managed label and the
  # template's UID), never a member-local object of the same name.
  - apiGroups: [""]
    resources: [pods{{ if .Values.serviceProxy.enabled }}, services{{ end }}]
    verbs: [get]
  # The cluster proxy impersonates the gateway's identity in the member. get as
  # well as create: members older than 1.35 authorize WebSocket GET as get.
  - apiGroups: [""]
    resources: [pods/exec, pods/attach, pods/portforward]
    verbs: [get, create]
  - apiGroups: [""]
    resources: [pods/log]
    verbs: [get]
  # kubectl debug: the ephemeral container the gateway adds to the member's
  # copy, after a SubjectAccessReview of the caller's write on the template.
  - apiGroups: [""]
    resources: [pods/ephemeralcontainers]
    verbs: [patch, update]
  # pods/proxy, authorized in the gateway by the verb kube-apiserver derives
  # from the method (HEAD is get).
  - apiGroups: [""]
    resources: [pods/proxy]
    verbs: [get, create, update, patch, delete]
  # The authorize-mode merge of member events into pod-scoped events lists and
  # watches (--merge-member-events) reads them as the gateway, once it has
  # authorized the caller's list or watch in karmada-apiserver.
  - apiGroups: [""]
    resources: [events]
    verbs: [list, watch]
  {{- if .Values.serviceProxy.enabled }}
  # services/proxy, authorized in the gateway by the verb kube-apiserver derives
  # from the method (HEAD is get).
  - apiGroups: [""]
    resources: [services/proxy]
    verbs: [get, create, update, patch, delete]
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "gateway.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  {{- include "gateway.identitySubjects" . | indent 2 }}
---
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterPropagationPolicy
metadata:
  name: {{ $name }}
  labels:
    {{- include "gateway.labels" . | nindent 4 }}
spec:
  resourceSelectors:
    - apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      name: {{ $name }}
    - apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRoleBinding
      name: {{ $name }}
  placement:
    {{- toYaml .Values.karmadaResources.memberPlacement | nindent 4 }}
{{- end -}}

{{/* The name of the executors' clusters/proxy ClusterRole and ClusterRoleBinding. */}}
{{- define "gateway.executorsName" -}}
{{- printf "%s-executors-cluster-proxy" (include "gateway.fullname" .) -}}
{{- end -}}

{{- define "gateway.executorsRBACNeeded" -}}
{{- if and (eq .Values.auth.mode "passthrough") .Values.passthrough.executors -}}true{{- end -}}
{{- end -}}

{{/*
passthrough mode: clusters/proxy for the executors' own identities. Karmada's
unified-auth controller reads only ClusterRoleBindings that grant
clusters/proxy, and lets its impersonator (karmada-impersonator in each
member) impersonate exactly the users, ServiceAccounts and groups listed on
them. The cluster proxy impersonates the caller with all its groups but
system:authenticated, so a group left off makes the member answer `groups
"X" is forbidden: ... cannot impersonate resource "groups"`. Hence the
ServiceAccount groups on this binding: any other ServiceAccount in
karmada-apiserver then passes karmada-apiserver's clusters/proxy check, but
members refuse to impersonate a user or ServiceAccount not listed here.
system:authenticated itself is never bound: it would grant everyone.
*/}}
{{- define "gateway.executorsRBAC" -}}
{{- $name := include "gateway.executorsName" . -}}
{{- $subjects := list -}}
{{- $groups := list -}}
{{- range .Values.passthrough.executors -}}
{{- if .serviceAccount -}}
{{- $subjects = append $subjects (dict "kind" "ServiceAccount" "name" .serviceAccount "namespace" .namespace) -}}
{{- $groups = concat $groups (list "system:serviceaccounts" (printf "system:serviceaccounts:%s" .namespace)) -}}
{{- else -}}
{{- $subjects = append $subjects (dict "apiGroup" "rbac.authorization.k8s.io" "kind" "User" "name" .user) -}}
{{- $groups = concat $groups (default list .groups) -}}
{{- end -}}
{{- end -}}
{{- range without (uniq $groups) "system:authenticated" -}}
{{- $subjects = append $subjects (dict "apiGroup" "rbac.authorization.k8s.io" "kind" "Group" "name" .) -}}
{{- end -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "gateway.labels" . | nindent 4 }}
rules:
  # karmada-apiserver derives the verb from the method: POST (SPDY exec,
  # attach, port-forward) is create, GET (WebSocket, logs, events) is get.
  - apiGroups: [cluster.karmada.io]
    resources: [clusters/proxy]
    verbs: [get, create{{ if .Values.serviceProxy.enabled }}, update, patch, delete{{ end }}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "gateway.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  {{- toYaml $subjects | nindent 2 }}
{{- end -}}

{{/*
A PropagationPolicy for the executors' job pods in each namespace of
executorPolicy.namespaces, in the shape they need: one cluster per pod, and
the pod's Secrets and ConfigMaps sent with it.
*/}}
{{- define "gateway.executorPolicies" -}}
{{- $p := .Values.executorPolicy -}}
{{- range $i, $ns := $p.namespaces -}}
{{- if $i }}
---
{{ end -}}
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: {{ $p.name }}
  namespace: {{ $ns }}
  labels:
    {{- include "gateway.labels" $ | nindent 4 }}
spec:
  # A job's registry credentials (imagePullSecrets), Secrets, ConfigMaps and
  # ServiceAccount exist only in karmada-apiserver unless they follow the pod.
  # Needs karmada-controller-manager --feature-gates=PropagateDeps=true (on in
  # its binary, off in Karmada's Helm chart).
  propagateDeps: true
  resourceSelectors:
    - apiVersion: v1
      kind: Pod
  placement:
    {{- with $p.clusterAffinity }}
    clusterAffinity:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    # Duplicated scheduling (the default) would run a bare Pod on every
    # selected cluster.
    spreadConstraints:
      - spreadByField: cluster
        maxGroups: 1
        minGroups: 1
{{- end }}
{{- end -}}

{{/* Every karmada-apiserver object this release wants, as one multi-document string. */}}
{{- define "gateway.karmadaManifests" -}}
{{- $docs := list -}}
{{- if .Values.karmadaResources.rbac -}}
{{- $docs = append $docs (include "gateway.karmadaRBAC" .) -}}
{{- end -}}
{{- if and .Values.karmadaResources.memberRBAC (eq .Values.auth.mode "authorize") -}}
{{- $docs = append $docs (include "gateway.memberRBAC" .) -}}
{{- end -}}
{{- if include "gateway.executorsRBACNeeded" . -}}
{{- $docs = append $docs (include "gateway.executorsRBAC" .) -}}
{{- end -}}
{{- if .Values.executorPolicy.namespaces -}}
{{- $docs = append $docs (include "gateway.executorPolicies" .) -}}
{{- end -}}
{{- join "\n---\n" $docs -}}
{{- end -}}

{{- define "gateway.podStatusInterpreter" -}}
{{- $f := .Files.Get "files/pod-status-interpreter.yaml" -}}
{{- if not $f -}}
{{- fail "files/pod-status-interpreter.yaml is missing or empty: it links to deploy/karmada/pod-status-interpreter.yaml" -}}
{{- end -}}
{{- $f -}}
{{- end -}}
