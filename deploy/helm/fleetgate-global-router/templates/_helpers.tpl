{{/* Names and labels shared by every template. */}}
{{- define "fgr.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fgr.fullname" -}}
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

{{- define "fgr.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fgr.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fgr.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "fgr.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fleetgate
app.kubernetes.io/component: global-router
{{- end -}}

{{/* The trial Redis has its own name label, so the router's selector (Deployment, HPA, PDB, Services)
never matches the Redis pod and the Redis selector never matches a router pod. */}}
{{- define "fgr.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "fgr.name" . }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fgr.redisLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "fgr.redisSelectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fleetgate
app.kubernetes.io/component: redis
{{- end -}}

{{/* Replicas the router may run at its smallest: the PDB only makes sense above one. */}}
{{- define "fgr.minReplicas" -}}
{{- if .Values.autoscaling.enabled -}}{{ .Values.autoscaling.minReplicas }}{{- else -}}{{ .Values.replicaCount }}{{- end -}}
{{- end -}}

{{/* Secrets given by name are read by the init container at pod start. Their data (read from the
cluster at install/upgrade; empty under `helm template`) goes into a pod annotation, so an upgrade
after a rotation rolls the pods; the Reloader annotation does it without an upgrade. */}}
{{- define "fgr.existingSecretNames" -}}
{{- $names := list -}}
{{- with .Values.existingTenantsSecret }}{{ $names = append $names . }}{{ end -}}
{{- with .Values.existingAgentsSecret }}{{ $names = append $names . }}{{ end -}}
{{- with .Values.redis.existingSecret }}{{ $names = append $names . }}{{ end -}}
{{- $names | uniq | join "," -}}
{{- end -}}

{{- define "fgr.existingSecretsChecksum" -}}
{{- $data := dict -}}
{{- range $name := splitList "," (include "fgr.existingSecretNames" .) -}}
{{- if $name -}}
{{- $s := lookup "v1" "Secret" $.Release.Namespace $name -}}
{{- $_ := set $data $name (dig "data" dict $s) -}}
{{- end -}}
{{- end -}}
{{- toJson $data | sha256sum -}}
{{- end -}}

{{- define "fgr.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fgr.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "fgr.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "fgr.redisEnabled" -}}
{{- if or .Values.redis.existingSecret .Values.redis.deploy.enabled .Values.config.redis -}}true{{- end -}}
{{- end -}}

{{- define "fgr.tenantsSecret" -}}
{{- default (printf "%s-tenants" (include "fgr.fullname" .)) .Values.existingTenantsSecret -}}
{{- end -}}

{{- define "fgr.agentsSecret" -}}
{{- default (printf "%s-agents" (include "fgr.fullname" .)) .Values.existingAgentsSecret -}}
{{- end -}}

{{/* The non-secret part of the router config: values plus the listen addresses. */}}
{{- define "fgr.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "host" "0.0.0.0" -}}
{{- $_ := set $cfg "port" (int .Values.ports.http) -}}
{{- $cap := default dict $cfg.capacity -}}
{{- $_ := set $cap "host" "0.0.0.0" -}}
{{- $_ := set $cap "port" (int .Values.ports.grpc) -}}
{{- include "fgr.applyCapacityTls" (dict "cap" $cap "root" .) -}}
{{- $_ := set $cfg "capacity" $cap -}}
{{- $replicas := ternary .Values.autoscaling.maxReplicas .Values.replicaCount .Values.autoscaling.enabled -}}
{{- if and (gt (int $replicas) 1) (not (include "fgr.redisEnabled" .)) -}}
{{- fail "several router replicas need shared state: set redis.existingSecret (or redis.deploy.enabled for trials), or run replicaCount: 1 with autoscaling.enabled: false" -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{- define "fgr.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "fgr.volumeMounts" -}}
- name: base
  mountPath: /etc/fleetgate/base
  readOnly: true
- name: tenants
  mountPath: /etc/fleetgate/tenants
  readOnly: true
- name: agents
  mountPath: /etc/fleetgate/agents
  readOnly: true
- name: run
  mountPath: /run/fleetgate
- name: tmp
  mountPath: /tmp
{{- include "fgr.securityVolumeMounts" . }}
{{- end -}}

{{/* The Redis URL reaches only the init container, from a Secret (or the trial Redis's Service). */}}
{{- define "fgr.redisEnv" -}}
{{- if .Values.redis.existingSecret -}}
env:
  - name: FLEETGATE_REDIS_URL
    valueFrom:
      secretKeyRef:
        name: {{ .Values.redis.existingSecret }}
        key: {{ .Values.redis.key }}
{{- else if .Values.redis.deploy.enabled -}}
env:
  - name: FLEETGATE_REDIS_URL  # the trial Redis's URL with its generated password (redis.yaml)
    valueFrom:
      secretKeyRef:
        name: {{ include "fgr.redisAuthSecret" . }}
        key: url
{{- end -}}
{{- end -}}
