{{/*
The chart name, or nameOverride: the app.kubernetes.io/name label.
*/}}
{{- define "switchboard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every resource name: fullnameOverride, else the release name, followed by
the chart name unless the release name contains it. Truncated to leave room for the
longest suffix ("-execution-viewer", 17 characters) within 63.
*/}}
{{- define "switchboard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 46 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 46 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 46 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "switchboard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "switchboard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: switchboard
{{- end }}

{{/*
Labels that select the runtime's pods.
*/}}
{{- define "switchboard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchboard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The runtime's ServiceAccount.
*/}}
{{- define "switchboard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "switchboard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: name an existing ServiceAccount when serviceAccount.create=false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference: repository@digest, or repository:tag with the tag defaulting to the
chart's appVersion.
*/}}
{{- define "switchboard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The number of replicas: replicaCount, else 2 with the Redis or PostgreSQL event store
and 1 with the memory store.
*/}}
{{- define "switchboard.replicas" -}}
{{- if kindIs "invalid" .Values.replicaCount }}
{{- if has .Values.eventStore.type (list "redis" "postgres") }}2{{ else }}1{{ end }}
{{- else }}
{{- int .Values.replicaCount }}
{{- end }}
{{- end }}

{{/*
The URL of the runtime's Service, as callers in the cluster use it.
*/}}
{{- define "switchboard.runtimeURL" -}}
{{- $host := printf "%s.%s.svc" (include "switchboard.fullname" .) .Release.Namespace }}
{{- $scheme := include "switchboard.runtimeScheme" . }}
{{- if eq (int .Values.service.port) (ternary 443 80 (eq $scheme "https")) }}
{{- printf "%s://%s" $scheme $host }}
{{- else }}
{{- printf "%s://%s:%d" $scheme $host (int .Values.service.port) }}
{{- end }}
{{- end }}

{{/*
The scheme of the execution API: https with a certificate, else http.
*/}}
{{- define "switchboard.runtimeScheme" -}}
{{- ternary "https" "http" (ne (include "switchboard.runtimeTLSSecret" .) "") }}
{{- end }}

{{/*
The Secret of the execution API's certificate: service.tls.existingSecret, else the
cert-manager Certificate's with certManager.enabled, else none.
*/}}
{{- define "switchboard.runtimeTLSSecret" -}}
{{- if .Values.service.tls.existingSecret }}
{{- .Values.service.tls.existingSecret }}
{{- else if .Values.certManager.enabled }}
{{- printf "%s-runtime-tls" (include "switchboard.fullname" .) }}
{{- end }}
{{- end }}

{{/*
The Secret of /metrics' certificate, which only the secure metrics server uses:
metrics.tls.existingSecret, else the cert-manager Certificate's with certManager.enabled,
else none (a self-signed certificate).
*/}}
{{- define "switchboard.metricsTLSSecret" -}}
{{- if and .Values.metrics.enabled .Values.metrics.secure }}
{{- if .Values.metrics.tls.existingSecret }}
{{- .Values.metrics.tls.existingSecret }}
{{- else if .Values.certManager.enabled }}
{{- printf "%s-metrics-tls" (include "switchboard.fullname" .) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Cross-field rules, checked again here for renders with --skip-schema-validation;
values.schema.json refuses the same values first.
*/}}
{{- define "switchboard.validate" -}}
{{- if and (eq .Values.eventStore.type "memory") (gt (int (include "switchboard.replicas" .)) 1) }}
{{- fail "replicaCount: eventStore.type=memory keeps executions in one process, so it runs 0 or 1 replica; set eventStore.type=redis or postgres for more" }}
{{- end }}
{{- if and (eq .Values.eventStore.type "redis") (not .Values.eventStore.redis.existingSecret) }}
{{- fail "eventStore.redis.existingSecret: eventStore.type=redis needs the name of a Secret holding the Redis URL" }}
{{- end }}
{{- if and (eq .Values.eventStore.type "postgres") (not .Values.eventStore.postgres.existingSecret) }}
{{- fail "eventStore.postgres.existingSecret: eventStore.type=postgres needs the name of a Secret holding the PostgreSQL URL" }}
{{- end }}
{{- if and (eq .Values.auth.mode "static") (not .Values.auth.static.existingSecret) }}
{{- fail "auth.static.existingSecret: auth.mode=static needs the name of a Secret holding the tokens file" }}
{{- end }}
{{- if and (eq .Values.auth.mode "kubernetes") (not .Values.auth.audiences) }}
{{- fail "auth.audiences: auth.mode=kubernetes needs at least one audience" }}
{{- end }}
{{- if and .Values.metrics.tls.existingSecret (not .Values.metrics.secure) }}
{{- fail "metrics.tls.existingSecret: needs metrics.secure=true, which serves /metrics over TLS" }}
{{- end }}
{{- end }}
