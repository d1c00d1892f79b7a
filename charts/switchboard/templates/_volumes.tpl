{{/*
The runtime's volume mounts: one directory per mounted Secret, never a subPath file, so
that the kubelet updates it in place (the tokens file is re-read when it changes).
*/}}
{{- define "switchboard.volumeMounts" -}}
{{- $r := .Values.eventStore.redis }}
{{- if eq .Values.eventStore.type "redis" }}
- name: redis-url
  mountPath: /etc/switchboard/redis
  readOnly: true
{{- if or $r.ca.secretName $r.ca.configMapName }}
- name: redis-ca
  mountPath: /etc/switchboard/redis-ca
  readOnly: true
{{- end }}
{{- if and $r.sentinel.master $r.sentinel.passwordSecret.name }}
- name: redis-sentinel-password
  mountPath: /etc/switchboard/redis-sentinel
  readOnly: true
{{- end }}
{{- end }}
{{- if eq .Values.auth.mode "static" }}
- name: auth-tokens
  mountPath: /etc/switchboard/auth
  readOnly: true
{{- end }}
{{- if .Values.auth.streamToken.existingSecret }}
- name: stream-token-key
  mountPath: /etc/switchboard/stream-token
  readOnly: true
{{- end }}
{{- if include "switchboard.runtimeTLSSecret" . }}
- name: runtime-tls
  mountPath: /etc/switchboard/tls
  readOnly: true
{{- end }}
{{- if include "switchboard.metricsTLSSecret" . }}
# --metrics-cert-path, as kubebuilder's chart mounts the metrics certificate.
- name: metrics-cert
  mountPath: /tmp/k8s-metrics-server/metrics-certs
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The pod's volumes. Secret files are readable by their owner and group only (mode 0440,
group podSecurityContext.fsGroup).
*/}}
{{- define "switchboard.volumes" -}}
{{- $r := .Values.eventStore.redis }}
{{- if eq .Values.eventStore.type "redis" }}
- name: redis-url
  secret:
    secretName: {{ $r.existingSecret }}
    defaultMode: 288
    items:
      - key: {{ $r.existingSecretKey }}
        path: url
{{- if $r.ca.secretName }}
- name: redis-ca
  secret:
    secretName: {{ $r.ca.secretName }}
    defaultMode: 288
    items:
      - key: {{ $r.ca.key }}
        path: ca.crt
{{- else if $r.ca.configMapName }}
- name: redis-ca
  configMap:
    name: {{ $r.ca.configMapName }}
    items:
      - key: {{ $r.ca.key }}
        path: ca.crt
{{- end }}
{{- if and $r.sentinel.master $r.sentinel.passwordSecret.name }}
- name: redis-sentinel-password
  secret:
    secretName: {{ $r.sentinel.passwordSecret.name }}
    defaultMode: 288
    items:
      - key: {{ $r.sentinel.passwordSecret.key }}
        path: password
{{- end }}
{{- end }}
{{- if eq .Values.auth.mode "static" }}
- name: auth-tokens
  secret:
    secretName: {{ .Values.auth.static.existingSecret }}
    defaultMode: 288
    items:
      - key: {{ .Values.auth.static.key }}
        path: tokens
{{- end }}
{{- if .Values.auth.streamToken.existingSecret }}
- name: stream-token-key
  secret:
    secretName: {{ .Values.auth.streamToken.existingSecret }}
    defaultMode: 288
    items:
      - key: {{ .Values.auth.streamToken.key }}
        path: key
{{- end }}
{{- with include "switchboard.runtimeTLSSecret" . }}
- name: runtime-tls
  secret:
    secretName: {{ . }}
    defaultMode: 288
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- with include "switchboard.metricsTLSSecret" . }}
- name: metrics-cert
  secret:
    secretName: {{ . }}
    defaultMode: 288
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}
