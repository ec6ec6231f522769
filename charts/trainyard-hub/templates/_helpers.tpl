{{/* Name of the chart's objects: the release name, with "trainyard-hub" unless it already says so. */}}
{{- define "trainyard-hub.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "trainyard-hub.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "trainyard-hub.labels" -}}
{{ include "trainyard-hub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "trainyard-hub.serviceAccountName" -}}
{{- default (include "trainyard-hub.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "trainyard-hub.webhookService" -}}
{{- printf "%s-webhook" (include "trainyard-hub.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Secret holding the webhook's serving certificate. */}}
{{- define "trainyard-hub.webhookCertSecret" -}}
{{- if .Values.certManager.enabled -}}
{{- printf "%s-webhook-cert" (include "trainyard-hub.fullname" .) -}}
{{- else -}}
{{- required "webhook.certSecretName is required when certManager.enabled is false" .Values.webhook.certSecretName -}}
{{- end -}}
{{- end -}}
