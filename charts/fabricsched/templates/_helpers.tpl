{{/* Names and labels shared by every object of the release. */}}

{{- define "fabricsched.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name; a release named like the chart is not repeated ("fabricsched"). */}}
{{- define "fabricsched.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "fabricsched.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fabricsched.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "fabricsched.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "fabricsched.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fabricsched
{{- end }}

{{- define "fabricsched.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fabricsched.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "fabricsched.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The KubeSchedulerConfiguration. files/kube-scheduler-config.yaml.tmpl is a byte copy of
fabricsched/extender/kube-scheduler-config.yaml.tmpl, the one template `fabricsched cluster up`
renders too; only its three ${...} placeholders are filled here, exactly as Python's
string.Template does (tests/unit/deploy/test_deploy_files.py keeps the copy byte-equal;
tests/integration/test_chart.py compares both renderings).
- kubeconfig "": the in-cluster service account.
- the extender: the fabricsched container next to the scheduler, on the pod's loopback.
- the Lease `fabricsched-scheduler` lives in the release namespace (the Role in rbac.yaml).
*/}}
{{- define "fabricsched.schedulerConfig" -}}
{{- .Files.Get "files/kube-scheduler-config.yaml.tmpl"
    | replace "${kubeconfig}" ""
    | replace "${extender_url}" "http://127.0.0.1:8888"
    | replace "${lease_namespace}" .Release.Namespace }}
{{- end }}
