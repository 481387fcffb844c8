{{/* Names and labels shared by every template. */}}
{{- define "fgw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fgw.fullname" -}}
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

{{- define "fgw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fgw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fgw.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "fgw.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fleetgate
app.kubernetes.io/component: cluster-gateway
{{- end -}}

{{- define "fgw.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fgw.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "fgw.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "fgw.poolName" -}}
{{- default (printf "%s-pool" (include "fgw.fullname" .)) .Values.inferenceGateway.inferencePool.name -}}
{{- end -}}

{{- define "fgw.gatewayName" -}}
{{- default (include "fgw.fullname" .) .Values.inferenceGateway.gateway.name -}}
{{- end -}}

{{/* TLS on the ext_proc port: asked for, or implied by an inference gateway (Envoy AI Gateway dials
the endpoint picker over TLS only). */}}
{{- define "fgw.extProcTls" -}}
{{- if or .Values.extProcTls.enabled .Values.inferenceGateway.enabled -}}true{{- end -}}
{{- end -}}

{{- define "fgw.extProcTlsSecret" -}}
{{- default (printf "%s-extproc-tls" (include "fgw.fullname" .)) .Values.extProcTls.existingSecret -}}
{{- end -}}

{{- define "fgw.tokenSecretName" -}}
{{- if .Values.agentToken.existingSecret -}}
{{- .Values.agentToken.existingSecret -}}
{{- else -}}
{{- printf "%s-agent-token" (include "fgw.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
The effective gateway spec: `.Values.gateway` plus what only the release knows (namespace, the
InferencePool this chart creates). Rendered once, used by the ConfigMap, the CR and the Deployment.
*/}}
{{- define "fgw.spec" -}}
{{- $spec := deepCopy .Values.gateway -}}
{{- $discovery := default dict $spec.discovery -}}
{{- if $discovery.static -}}
{{- /* Helm merges maps with the chart defaults: a user's `static` replaces the default `kubernetes`. */ -}}
{{- $_ := unset $discovery "kubernetes" -}}
{{- end -}}
{{- if and .Values.inferenceGateway.enabled (not $discovery.static) -}}
{{- $k8s := default dict $discovery.kubernetes -}}
{{- $_ := set $k8s "inferencePool" (include "fgw.poolName" .) -}}
{{- $_ := unset $k8s "selector" -}}
{{- $_ := set $discovery "kubernetes" $k8s -}}
{{- $ext := default dict $spec.extProc -}}
{{- $_ := set $ext "enabled" true -}}
{{- $_ := set $spec "extProc" $ext -}}
{{- end -}}
{{- if include "fgw.extProcTls" . -}}
{{- $ext := default dict $spec.extProc -}}
{{- $_ := set $ext "enabled" true -}}
{{- $_ := set $ext "tlsCertFile" "/run/fleetgate/tls/tls.crt" -}}
{{- $_ := set $ext "tlsKeyFile" "/run/fleetgate/tls/tls.key" -}}
{{- $_ := set $spec "extProc" $ext -}}
{{- end -}}
{{- if $discovery.kubernetes -}}
{{- if not $discovery.kubernetes.namespace -}}
{{- $_ := set $discovery.kubernetes "namespace" .Release.Namespace -}}
{{- end -}}
{{- end -}}
{{- $_ := set $spec "discovery" $discovery -}}
{{- if $spec.globalRouter -}}
{{- if not $spec.globalRouter.address -}}
{{- fail "gateway.globalRouter.address is required when gateway.globalRouter is set (host:port of the global router's gRPC capacity port)" -}}
{{- end -}}
{{- if not (or .Values.agentToken.existingSecret .Values.agentToken.value) -}}
{{- fail "gateway.globalRouter is set: give the agent token with agentToken.existingSecret (or agentToken.value for trials)" -}}
{{- end -}}
{{- end -}}
{{- include "fgw.applyAuth" (dict "spec" $spec "root" .) -}}
{{- include "fgw.applyRouterTls" (dict "spec" $spec "root" .) -}}
{{- toYaml $spec -}}
{{- end -}}

{{- define "fgw.httpPort" -}}
{{- default 8080 .Values.gateway.port -}}
{{- end -}}

{{- define "fgw.extProcEnabled" -}}
{{- $spec := include "fgw.spec" . | fromYaml -}}
{{- if and $spec.extProc $spec.extProc.enabled -}}true{{- end -}}
{{- end -}}

{{- define "fgw.extProcPort" -}}
{{- $spec := include "fgw.spec" . | fromYaml -}}
{{- if and $spec.extProc $spec.extProc.port -}}{{ $spec.extProc.port }}{{- else -}}9002{{- end -}}
{{- end -}}

{{- define "fgw.discoveryNamespace" -}}
{{- $spec := include "fgw.spec" . | fromYaml -}}
{{- if $spec.discovery.kubernetes -}}{{ $spec.discovery.kubernetes.namespace }}{{- else -}}{{ .Release.Namespace }}{{- end -}}
{{- end -}}
