{{/*
Security settings (docs/security.md), kept apart from the other templates.

fgr.applyCapacityTls: the capacity gRPC port serves TLS from a mounted kubernetes.io/tls Secret
(cert-manager's usual output) unless capacityTls.enabled is false. Agents verify it
(gateway chart: gateway.globalRouter.tls, routerCa).
*/}}
{{- define "fgr.capacityTlsSecret" -}}
{{- default (printf "%s-capacity-tls" (include "fgr.fullname" .)) .Values.capacityTls.secretName -}}
{{- end -}}

{{- define "fgr.capacityTlsDir" -}}/etc/fleetgate/capacity-tls{{- end -}}
{{- define "fgr.gatewaySecretsDir" -}}/etc/fleetgate/gateway-secrets{{- end -}}

{{- define "fgr.applyCapacityTls" -}}
{{- $cap := .cap -}}
{{- $root := .root -}}
{{- if $root.Values.capacityTls.enabled -}}
{{- $_ := set $cap "tlsCertFile" (printf "%s/tls.crt" (include "fgr.capacityTlsDir" $root)) -}}
{{- $_ := set $cap "tlsKeyFile" (printf "%s/tls.key" (include "fgr.capacityTlsDir" $root)) -}}
{{- end -}}
{{- end -}}

{{- define "fgr.securityVolumeMounts" -}}
{{- if .Values.capacityTls.enabled }}
- name: capacity-tls
  mountPath: {{ include "fgr.capacityTlsDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.gatewaySecrets.existingSecret }}
- name: gateway-secrets
  mountPath: {{ include "fgr.gatewaySecretsDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "fgr.securityVolumes" -}}
{{- if .Values.capacityTls.enabled }}
- name: capacity-tls
  secret:
    secretName: {{ include "fgr.capacityTlsSecret" . }}
    defaultMode: 0440  # group-readable: the pod runs with fsGroup 10001
{{- end }}
{{- if .Values.gatewaySecrets.existingSecret }}
- name: gateway-secrets
  secret:
    secretName: {{ .Values.gatewaySecrets.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{- define "fgr.redisAuthSecret" -}}
{{- printf "%s-redis-auth" (include "fgr.fullname" .) -}}
{{- end -}}
