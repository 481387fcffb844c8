{{/*
Security settings (docs/security.md), kept apart from the other templates.

fgw.applyAuth: sets `auth` in the gateway spec from `.Values.gatewayAuth` (unless the spec sets
`gateway.auth` itself). A gateway that joins a fleet (`gateway.globalRouter`) must authenticate its
router: an HMAC secret from a Secret (default), a bearer token digest, or an explicit `mode: none`.
*/}}
{{- define "fgw.authSecretName" -}}
{{- if .Values.gatewayAuth.existingSecret -}}
{{- .Values.gatewayAuth.existingSecret -}}
{{- else -}}
{{- printf "%s-gateway-auth" (include "fgw.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "fgw.authMountPath" -}}/var/run/fleetgate/gateway-auth{{- end -}}

{{- define "fgw.authMode" -}}
{{- $a := .Values.gatewayAuth -}}
{{- if $a.mode -}}{{ $a.mode }}
{{- else if or $a.existingSecret $a.value -}}hmac
{{- else if $a.tokenSha256 -}}bearer
{{- else -}}none
{{- end -}}
{{- end -}}

{{- define "fgw.authUsesSecret" -}}
{{- if and (eq (include "fgw.authMode" .) "hmac") (not .Values.gateway.auth) -}}true{{- end -}}
{{- end -}}

{{- define "fgw.applyAuth" -}}
{{- $spec := .spec -}}
{{- $root := .root -}}
{{- $a := $root.Values.gatewayAuth -}}
{{- if not $spec.auth -}}
{{- $mode := include "fgw.authMode" $root -}}
{{- $auth := dict "mode" $mode -}}
{{- if eq $mode "hmac" -}}
{{- if not (or $a.existingSecret $a.value) -}}
{{- fail "gatewayAuth.mode hmac needs gatewayAuth.existingSecret (a Secret holding this cluster's router->gateway secret)" -}}
{{- end -}}
{{- $_ := set $auth "secretFile" (printf "%s/%s" (include "fgw.authMountPath" $root) $a.key) -}}
{{- else if eq $mode "bearer" -}}
{{- $_ := set $auth "tokenSha256" $a.tokenSha256 -}}
{{- else if and $spec.globalRouter (ne $a.mode "none") -}}
{{- fail "gateway.globalRouter is set, so this gateway joins a fleet: give gatewayAuth.existingSecret (the router->gateway HMAC secret; the router holds the same one) or set gatewayAuth.mode: none explicitly" -}}
{{- end -}}
{{- with $a.apiKeySha256 -}}
{{- $_ := set $auth "apiKeySha256" . -}}
{{- end -}}
{{- $_ := set $spec "auth" $auth -}}
{{- end -}}
{{- end -}}

{{/*
fgw.applyRouterTls: a gateway that joins a fleet talks TLS to the router's capacity port unless
gateway.globalRouter.tls is set to false explicitly; routerCa mounts the CA it verifies against.
*/}}
{{- define "fgw.routerCaDir" -}}/var/run/fleetgate/router-ca{{- end -}}

{{- define "fgw.applyRouterTls" -}}
{{- $spec := .spec -}}
{{- $root := .root -}}
{{- with $spec.globalRouter -}}
{{- if not (hasKey . "tls") -}}
{{- $_ := set . "tls" true -}}
{{- end -}}
{{- if and .tls $root.Values.routerCa.existingSecret (not .caFile) -}}
{{- $_ := set . "caFile" (printf "%s/%s" (include "fgw.routerCaDir" $root) $root.Values.routerCa.key) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "fgw.authVolumeMounts" -}}
{{- if include "fgw.authUsesSecret" . }}
- name: gateway-auth
  mountPath: {{ include "fgw.authMountPath" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "fgw.routerCaVolumeMounts" -}}
{{- if and .Values.gateway.globalRouter .Values.routerCa.existingSecret }}
- name: router-ca
  mountPath: {{ include "fgw.routerCaDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "fgw.authVolumes" -}}
{{- if include "fgw.authUsesSecret" . }}
- name: gateway-auth
  secret:
    secretName: {{ include "fgw.authSecretName" . }}
    defaultMode: 0440  # group-readable: the pod runs with fsGroup 10001
{{- end }}
{{- end -}}

{{- define "fgw.routerCaVolumes" -}}
{{- if and .Values.gateway.globalRouter .Values.routerCa.existingSecret }}
- name: router-ca
  secret:
    secretName: {{ .Values.routerCa.existingSecret }}
    items:
      - key: {{ .Values.routerCa.key }}
        path: {{ .Values.routerCa.key }}
{{- end }}
{{- end -}}
