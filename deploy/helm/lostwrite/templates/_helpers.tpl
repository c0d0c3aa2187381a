{{/* The labels every object carries, as deploy/base's kustomization sets them. */}}
{{- define "lostwrite.labels" -}}
app.kubernetes.io/name: lostwrite
app.kubernetes.io/part-of: lostwrite
{{- end }}

{{/* The agent pods: what the DaemonSet, the Services and the NetworkPolicy select. */}}
{{- define "lostwrite.agentPods" -}}
app.kubernetes.io/name: lostwrite
app.kubernetes.io/component: agent
{{- end }}
