{{/* The release's full name: <release>-sunk, or <release> if it already says sunk. */}}
{{- define "sunk.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* What Pods put in spec.schedulerName: scheduler.name, else <namespace>-<releaseName>. */}}
{{- define "sunk.schedulerName" -}}
{{- .Values.scheduler.name | default (printf "%s-%s" .Release.Namespace .Release.Name) -}}
{{- end -}}

{{/* Watched namespaces in namespace scope, as a JSON list: scope.namespaces, else the
release namespace. */}}
{{- define "sunk.namespaces" -}}
{{- $list := list -}}
{{- range splitList "," (.Values.scheduler.scope.namespaces | default "") -}}
{{- $ns := trim . -}}
{{- if $ns -}}{{- $list = append $list $ns -}}{{- end -}}
{{- end -}}
{{- if not $list -}}{{- $list = list .Release.Namespace -}}{{- end -}}
{{- $list | uniq | toJson -}}
{{- end -}}

{{- define "sunk.clusterScope" -}}
{{- if eq .Values.scheduler.scope.type "cluster" -}}true{{- end -}}
{{- end -}}

{{- define "sunk.loops.syncer" -}}
{{- if has "syncer" .Values.scheduler.components -}}true{{- end -}}
{{- end -}}

{{- define "sunk.slurmdNamespace" -}}
{{- .Values.scheduler.slurmd.namespace | default .Release.Namespace -}}
{{- end -}}

{{- define "sunk.scriptsNamespace" -}}
{{- .Values.slurm.scripts.namespace | default (include "sunk.slurmdNamespace" .) -}}
{{- end -}}

{{/* "true" when leader election is on: asked for, or more than one replica. */}}
{{- define "sunk.leaderElection" -}}
{{- if or .Values.scheduler.leaderElection.enabled (gt (int .Values.scheduler.replicas) 1) -}}true{{- end -}}
{{- end -}}

{{- define "sunk.leaseName" -}}
{{- .Values.scheduler.leaderElection.leaseName | default (include "sunk.fullname" .) -}}
{{- end -}}

{{/* The label the leader sets on its own Pod; Services that must reach it select it. */}}
{{- define "sunk.leaderLabel" -}}
{{- printf "%sleader" .Values.scheduler.annotationPrefix -}}
{{- end -}}

{{- define "sunk.serviceAccountName" -}}
{{- if .Values.scheduler.serviceAccount.create -}}
{{- .Values.scheduler.serviceAccount.name | default (include "sunk.fullname" .) -}}
{{- else -}}
{{- .Values.scheduler.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "sunk.policiesConfigMap" -}}
{{- printf "%s-policies" (include "sunk.fullname" .) -}}
{{- end -}}

{{- define "sunk.slurmTokenSecret" -}}
{{- .Values.slurm.auth.existingSecret | default (printf "%s-slurm-token" (include "sunk.fullname" .)) -}}
{{- end -}}

{{- define "sunk.hooksSecret" -}}
{{- .Values.scheduler.hooks.existingSecret | default (printf "%s-hooks" (include "sunk.fullname" .)) -}}
{{- end -}}

{{- define "sunk.dashboardSecret" -}}
{{- .Values.scheduler.dashboard.auth.existingSecret | default (printf "%s-dashboard" (include "sunk.fullname" .)) -}}
{{- end -}}

{{- define "sunk.hooksUrl" -}}
{{- .Values.scheduler.hooks.url | default (printf "http://%s-hooks.%s.svc.%s:%d" (include "sunk.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.scheduler.hooks.port)) -}}
{{- end -}}

{{- define "sunk.image" -}}
{{- $image := .Values.scheduler.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository ($image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "sunk.selectorLabels" -}}
app.kubernetes.io/name: sunk-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sunk.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "sunk.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: scheduler
app.kubernetes.io/part-of: sunk
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* A Secret value kept across upgrades: the given one, else the one already installed, else
a new random one. Call with (list $ctx namespace secretName key given). */}}
{{- define "sunk.keptSecret" -}}
{{- $ctx := index . 0 -}}
{{- $given := index . 4 -}}
{{- if $given -}}
{{- $given -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" (index . 1) (index . 2) -}}
{{- if and $existing $existing.data (hasKey $existing.data (index . 3)) -}}
{{- index $existing.data (index . 3) | b64dec -}}
{{- else -}}
{{- randAlphaNum 48 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A map as KEY=VALUE pairs, comma-separated, by key: a flag's value. */}}
{{- define "sunk.pairs" -}}
{{- $m := . -}}
{{- range $i, $k := keys $m | sortAlpha }}{{ if $i }},{{ end }}{{ $k }}={{ index $m $k }}{{ end -}}
{{- end }}
