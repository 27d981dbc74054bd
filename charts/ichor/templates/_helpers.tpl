{{/*
Labels of every object of a component: ichor.labels (dict "name" "ichor-auth" "root" $).
Selectors use ichor.selector, which never changes across versions.
*/}}
{{- define "ichor.selector" -}}
app.kubernetes.io/name: {{ .name }}
{{- end }}

{{- define "ichor.labels" -}}
{{- if .name -}}
{{ include "ichor.selector" . }}
{{ end -}}
app.kubernetes.io/part-of: ichor
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}

{{/* The namespace everything namespaced goes to. */}}
{{- define "ichor.namespace" -}}
{{ .Release.Namespace }}
{{- end }}

{{/* A ServiceAccount's user name: ichor.serviceAccountUser (dict "name" "ichor-controller" "root" $). */}}
{{- define "ichor.serviceAccountUser" -}}
system:serviceaccount:{{ .root.Release.Namespace }}:{{ .name }}
{{- end }}

{{/* A component's image: ichor.image (dict "component" "apiserver" "root" $). */}}
{{- define "ichor.image" -}}
{{- $img := .root.Values.image -}}
{{- $repo := printf "ichor-%s" .component -}}
{{- if $img.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" $img.registry) $repo }}{{ end -}}
{{- $digest := get $img.digests .component -}}
{{- if $digest -}}
{{ $repo }}@{{ $digest }}
{{- else -}}
{{ $repo }}:{{ $img.tag | default .root.Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The pod-level security context every component runs with. */}}
{{- define "ichor.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The container-level security context every component runs with. */}}
{{- define "ichor.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{/* Scheduling of a component's pods: ichor.scheduling .Values.controller. */}}
{{- define "ichor.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "ichor.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The TLS mode in effect: tls.mode, with auto resolved to cert-manager when its
API is served and to generate otherwise.
*/}}
{{- define "ichor.tlsMode" -}}
{{- if eq .Values.tls.mode "auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1/Certificate" }}cert-manager{{ else }}generate{{ end -}}
{{- else -}}
{{ .Values.tls.mode }}
{{- end -}}
{{- end }}

{{/* Whether a Prometheus operator kind is rendered: ichor.monitoring (dict "setting" "auto" "kind" "ServiceMonitor" "root" $). */}}
{{- define "ichor.monitoring" -}}
{{- if eq (toString .setting) "auto" -}}
{{- if .root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind) }}true{{ end -}}
{{- else if eq (toString .setting) "true" -}}
true
{{- end -}}
{{- end }}

{{/* The host of an https URL: ichor.urlHost "https://a.example:8443/x" is a.example. */}}
{{- define "ichor.urlHost" -}}
{{- (urlParse .).hostname -}}
{{- end }}

{{/* Everything the chart refuses, with what to do instead. */}}
{{- define "ichor.validate" -}}
{{- if and (gt (int .Values.apiserver.replicas) 1) (not .Values.apiserver.etcd.servers) }}
{{- fail "apiserver.replicas > 1 needs apiserver.etcd.servers: the embedded etcd is a single member, so more than one ichor-apiserver needs an external etcd cluster" }}
{{- end }}
{{- if and .Values.ui.enabled (not .Values.auth.enabled) }}
{{- fail "ui.enabled needs auth.enabled: the console signs people in through ichor-auth" }}
{{- end }}
{{- if and .Values.networkPolicy.enabled (not .Values.networkPolicy.podCIDRs) }}
{{- fail "networkPolicy.enabled needs networkPolicy.podCIDRs: the CIDRs of your pods, which it keeps off ichor-apiserver (kubectl get nodes -o jsonpath='{.items[*].spec.podCIDRs}')" }}
{{- end }}
{{- if and (eq .Values.tls.mode "cert-manager") (not (.Capabilities.APIVersions.Has "cert-manager.io/v1/Certificate")) }}
{{- fail "tls.mode cert-manager: this cluster does not serve cert-manager.io/v1; install cert-manager first, or use tls.mode generate" }}
{{- end }}
{{- if and .Values.ui.oidc.enabled (not .Values.ui.oidc.issuerURL) }}
{{- fail "ui.oidc.enabled needs ui.oidc.issuerURL: your OpenID provider's issuer" }}
{{- end }}
{{- /* As ichor-apiserver validates the IchorInstallation it creates from them: it would not start. */}}
{{- range .Values.installation.provisioningNetworks }}
{{- $bits := int (last (splitList "/" .)) }}
{{- if and (contains ":" .) (lt $bits 112) }}
{{- fail (printf "installation.provisioningNetworks: %s is wider than the controller scans; IPv6 networks must be /112 or smaller" .) }}
{{- else if and (not (contains ":" .)) (lt $bits 16) }}
{{- fail (printf "installation.provisioningNetworks: %s is wider than the controller scans; IPv4 networks must be /16 or smaller" .) }}
{{- end }}
{{- end }}
{{- end }}
