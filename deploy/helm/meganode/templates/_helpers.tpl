{{/* Names: <fullname>-store, <fullname>-shard, …; fullname is the release name when it contains
"meganode" (release "meganode" gives the names of deploy/store and deploy/scheduler). */}}
{{- define "meganode.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object (not of pod templates: those carry exactly their selector). */}}
{{- define "meganode.labels" -}}
app.kubernetes.io/part-of: meganode
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector (and pod template labels) of one workload: dict "root" . "name" N "component" C. */}}
{{- define "meganode.selector" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Image reference: dict "root" . "name" "meganode-store". */}}
{{- define "meganode.image" -}}
{{ .root.Values.image.registry }}/{{ .name }}:{{ .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end -}}

{{/* The restricted pod security context: the images' user is nonroot (65532). */}}
{{- define "meganode.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "meganode.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* host:7070 addresses of a StatefulSet's pods behind its headless Service: dict "name" N "count" C. */}}
{{- define "meganode.podAddrs" -}}
{{- $n := .name -}}
{{- range $i := until (int .count) -}}
{{- if $i }},{{ end }}{{ printf "%s-%d.%s:7070" $n $i $n }}
{{- end -}}
{{- end -}}

{{/* 'a', 'b' for a CEL list. */}}
{{- define "meganode.quotedNames" -}}
{{- range $i, $n := . }}{{ if $i }}, {{ end }}'{{ $n }}'{{ end -}}
{{- end -}}
