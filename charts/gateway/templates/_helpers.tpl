{{/* Names and labels shared by every template. */}}

{{- define "gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gateway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The member-trust pods' labels: another name, so that nothing selecting the gateway's pods selects them. */}}
{{- define "gateway.memberTrustSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gateway.name" . }}-member-trust
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* namespace/name of the Secret member-trust publishes in and the gateway reads (direct member access). */}}
{{- define "gateway.memberTrustSecret" -}}
{{- printf "%s/%s-member-trust" .Values.memberAccess.memberTrust.secretNamespace (include "gateway.fullname" .) -}}
{{- end -}}

{{- define "gateway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: karmada-exec-gateway
{{- end -}}

{{- define "gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gateway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gateway.metricsServiceName" -}}
{{- printf "%s-metrics" (include "gateway.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gateway.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "gateway.fullname" .)) .Values.tls.secretName -}}
{{- end -}}

{{- define "gateway.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Cross-field checks the schema cannot express with a clear message. */}}
{{- define "gateway.validate" -}}
{{- if and .Values.auth.clientCA.secretName (ne .Values.auth.mode "authorize") -}}
{{- fail "auth.clientCA.secretName is only used with auth.mode=authorize: in passthrough mode a client certificate cannot be forwarded upstream" -}}
{{- end -}}
{{- if and .Values.auth.clientCA.secretName (eq .Values.tls.source "none") -}}
{{- fail "auth.clientCA.secretName needs TLS serving: client certificates cannot be presented over plain HTTP (tls.source=none)" -}}
{{- end -}}
{{- if and (eq .Values.tls.source "certManager") (not .Values.tls.certManager.issuerRef.name) -}}
{{- fail "tls.certManager.issuerRef.name is required when tls.source=certManager" -}}
{{- end -}}
{{- $id := .Values.karmada.identity -}}
{{- if and .Values.karmadaResources.rbac (not (or $id.user $id.groups $id.serviceAccount.name)) -}}
{{- fail "karmada.identity needs a user, groups or a serviceAccount: the karmada-apiserver RBAC binds to the identity of karmada.kubeconfigSecret" -}}
{{- end -}}
{{- if and $id.serviceAccount.name (not $id.serviceAccount.namespace) -}}
{{- fail "karmada.identity.serviceAccount.namespace is required with karmada.identity.serviceAccount.name" -}}
{{- end -}}
{{- if and .Values.passthrough.executors (ne .Values.auth.mode "passthrough") -}}
{{- fail "passthrough.executors is only used with auth.mode=passthrough: in authorize mode the gateway calls the cluster proxy as itself, and executors need no clusters/proxy" -}}
{{- end -}}
{{- range .Values.passthrough.executors -}}
{{- if has "system:unauthenticated" (default list .groups) -}}
{{- fail "passthrough.executors must not list the group system:unauthenticated: it would give anonymous callers clusters/proxy" -}}
{{- end -}}
{{- end -}}
{{- if and (not (kindIs "invalid" .Values.terminationGracePeriodSeconds)) (le (int .Values.terminationGracePeriodSeconds) (int .Values.shutdownGracePeriodSeconds)) -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed shutdownGracePeriodSeconds (%v), or the kubelet kills streams before they drain" .Values.terminationGracePeriodSeconds .Values.shutdownGracePeriodSeconds) -}}
{{- end -}}
{{- end -}}

{{/* RBAC subjects for the gateway's identity in karmada-apiserver (and, through the cluster proxy's impersonation, in members). */}}
{{- define "gateway.identitySubjects" -}}
{{- include "gateway.subjectsOf" .Values.karmada.identity -}}
{{- end -}}

{{/* RBAC subjects for an identity: {user, groups, serviceAccount: {name, namespace}}. */}}
{{- define "gateway.subjectsOf" -}}
{{- $id := . -}}
{{- if $id.user }}
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: {{ $id.user | quote }}
{{- end }}
{{- range $id.groups }}
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: {{ . | quote }}
{{- end }}
{{- with $id.serviceAccount }}
{{- if .name }}
- kind: ServiceAccount
  name: {{ .name | quote }}
  namespace: {{ .namespace | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The groups Karmada's unified-auth controller needs on the clusters/proxy
binding of a ServiceAccount, or members answer `cannot impersonate resource
"groups"`. Only ever added to that binding: anything else bound to them would
be granted to every ServiceAccount in karmada-apiserver.
*/}}
{{- define "gateway.serviceAccountGroupSubjects" -}}
{{- with .Values.karmada.identity.serviceAccount }}
{{- if .name }}
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:serviceaccounts
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: {{ printf "system:serviceaccounts:%s" .namespace | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "gateway.leaseNeeded" -}}
{{- if and .Values.labeler.enabled .Values.labeler.leaderElection.enabled -}}true{{- end -}}
{{- end -}}

{{- define "gateway.terminationGracePeriodSeconds" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- /* After the grace period: up to 3 s for the streams the gateway ended to
write their records, 2 s for audit events waiting for their caller, 10 s
(--audit-drain-timeout) for the audit sinks to drain and, at the same time,
10 s (--record-sessions-s3-drain-timeout) for recordings to be uploaded,
and a margin. */ -}}
{{- add (int .Values.shutdownGracePeriodSeconds) 20 -}}
{{- else -}}
{{- int .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{- /*
gateway.volumeSource is a volume source value as the user meant it: helm
merges a value set on install (a persistentVolumeClaim, a hostPath) into the
default emptyDir, which would give the volume two types; a type set beside
the default emptyDir replaces it.
*/ -}}
{{- define "gateway.volumeSource" -}}
{{- $vol := . -}}
{{- if and (hasKey $vol "emptyDir") (gt (len $vol) 1) -}}
{{- $vol = omit $vol "emptyDir" -}}
{{- end -}}
{{- toYaml $vol -}}
{{- end -}}

