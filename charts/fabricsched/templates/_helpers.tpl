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
The kube-scheduler image: the tag defaults to the cluster's own version, any vendor suffix cut
off ("v1.37.2-eks-113cf36" and "v1.37.2+k3s1" give "v1.37.2"), as the scheduler's API use follows
its own version.
*/}}
{{- define "fabricsched.schedulerImage" -}}
{{- $version := regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version }}
{{- $tag := .Values.scheduler.image.tag }}
{{- if not $tag }}
{{- if not $version }}
{{- fail (printf "cluster version %q has no vX.Y.Z: set scheduler.image.tag" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- $tag = printf "v%s" (trimPrefix "v" $version) }}
{{- end }}
{{- printf "%s:%s" .Values.scheduler.image.repository $tag }}
{{- end }}

{{/*
The GPU resources the extender manages: scheduler.gpuResources, or else topology.gpuResource,
plus the gpuResource of the topology this chart creates; repeats dropped, first kept.
*/}}
{{- define "fabricsched.managedResources" -}}
{{- $names := .Values.scheduler.gpuResources | default (list .Values.topology.gpuResource) }}
{{- if .Values.topology.create }}
{{- $names = append $names .Values.topology.gpuResource }}
{{- end }}
{{- $entries := list }}
{{- range uniq $names }}
{{- $entries = append $entries (dict "name" . "ignoredByScheduler" false) }}
{{- end }}
{{- if .Values.scheduler.dra }}
{{- $entries = list }}
{{- end }}
{{- toJson $entries }}
{{- end }}

{{/*
The KubeSchedulerConfiguration. files/kube-scheduler-config.yaml.tmpl is a byte copy of
fabricsched/api/kube-scheduler-config.yaml.tmpl, the one template `fabricsched cluster up`
renders too; only its ${...} placeholders are filled here, exactly as Python's
string.Template does (tests/unit/deploy/test_deploy_files.py keeps the copy byte-equal;
tests/integration/test_chart.py compares both renderings).
- kubeconfig "": the in-cluster service account.
- the extender: the fabricsched container next to the scheduler, on the pod's loopback.
- the Lease `fabricsched-scheduler` lives in the release namespace (the Role in rbac.yaml).
- managedResources: fabricsched.managedResources above.
*/}}
{{- define "fabricsched.schedulerConfig" -}}
{{- $tls := .Values.extender.tls.enabled }}
{{- $files := dict "caFile" "/etc/fabricsched-tls/ca.crt" "certFile" "/etc/fabricsched-tls/tls.crt" "keyFile" "/etc/fabricsched-tls/tls.key" }}
{{- .Files.Get "files/kube-scheduler-config.yaml.tmpl"
    | replace "${kubeconfig}" ""
    | replace "${extender_url}" (ternary "https://127.0.0.1:8888" "http://127.0.0.1:8888" $tls)
    | replace "${lease_namespace}" .Release.Namespace
    | replace "${managed_resources}" (include "fabricsched.managedResources" .)
    | replace "${enable_https}" (ternary "true" "false" $tls)
    | replace "${tls_config}" (ternary (toJson $files) "null" $tls) }}
{{- end }}

{{/*
The extender's mutual TLS material (extender.tls.enabled): one CA, the extender's serving
certificate for 127.0.0.1 and the scheduler's client certificate, generated once and then
kept (an upgrade reads the Secret back with lookup, so the pods are not rolled for new
certificates each time). `helm template` cannot look up, so it always renders fresh ones.
*/}}
{{- define "fabricsched.extenderTLSData" -}}
{{- $name := printf "%s-extender-tls" (include "fabricsched.fullname" .) }}
{{- $found := lookup "v1" "Secret" .Release.Namespace $name }}
{{- if and $found (index ($found.data | default dict) "ca.crt") }}
{{- toYaml $found.data }}
{{- else }}
{{- $days := int .Values.extender.tls.validityDays }}
{{- $ca := genCA "fabricsched-extender-ca" $days }}
{{- $server := genSignedCert "fabricsched-extender" (list "127.0.0.1") (list "localhost") $days $ca }}
{{- $client := genSignedCert "fabricsched-kube-scheduler" nil nil $days $ca }}
ca.crt: {{ $ca.Cert | b64enc }}
tls.crt: {{ $server.Cert | b64enc }}
tls.key: {{ $server.Key | b64enc }}
client.crt: {{ $client.Cert | b64enc }}
client.key: {{ $client.Key | b64enc }}
{{- end }}
{{- end }}

{{/* The Secret holding the webhook's serving certificate (webhook.yaml, deployment.yaml). */}}
{{- define "fabricsched.webhookSecretName" -}}
{{- .Values.webhook.tls.secretName | default (printf "%s-webhook-tls" (include "fabricsched.fullname" .)) }}
{{- end }}

{{/*
The GPU resources the webhook counts (--webhook-gpu-resource, one per line): the same names as
fabricsched.managedResources, so the pods it sends to fabricsched are the ones the extender manages.
*/}}
{{- define "fabricsched.webhookGpuResourceArgs" -}}
{{- $names := .Values.scheduler.gpuResources | default (list .Values.topology.gpuResource) }}
{{- if .Values.topology.create }}
{{- $names = append $names .Values.topology.gpuResource }}
{{- end }}
{{- range uniq $names }}
- {{ printf "--webhook-gpu-resource=%s" . | quote }}
{{- end }}
{{- if .Values.scheduler.dra }}
- "--webhook-dra-claims"
{{- end }}
{{- end }}
