{{/* Name of the chart's objects: the release name, with "trainyard-hub" unless it already says so. */}}
{{- define "trainyard-agent.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "trainyard-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "trainyard-agent.labels" -}}
{{ include "trainyard-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "trainyard-agent.serviceAccountName" -}}
{{- default (include "trainyard-agent.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "trainyard-agent.target" -}}
{{- required "target (the name of the Target on the hub) is required" .Values.target -}}
{{- end -}}

{{/* Whether the agent serves Trainer's status API: on Slurm only with a URL the compute nodes reach. */}}
{{- define "trainyard-agent.statusAPI" -}}
{{- if and .Values.statusAPI.enabled (or (ne .Values.backend "slurm") .Values.statusAPI.url) -}}
true
{{- end -}}
{{- end -}}

{{- define "trainyard-agent.statusService" -}}
{{- default (printf "%s-status" (include "trainyard-agent.fullname" .)) .Values.statusAPI.service.name -}}
{{- end -}}
