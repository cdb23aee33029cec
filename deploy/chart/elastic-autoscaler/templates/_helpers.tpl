{{/* Names ------------------------------------------------------------------------------- */}}

{{- define "elastic-autoscaler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "elastic-autoscaler.fullname" -}}
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

{{- define "elastic-autoscaler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "elastic-autoscaler.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: give the ServiceAccount to use when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "elastic-autoscaler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "elastic-autoscaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "elastic-autoscaler.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "elastic-autoscaler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: elastic-autoscaler
{{- end -}}

{{- define "elastic-autoscaler.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Settings ---------------------------------------------------------------------------- */}}

{{- define "elastic-autoscaler.live" -}}
{{- if eq .Values.mode "live" -}}true{{- end -}}
{{- end -}}

{{/* The settings file: every non-null `settings` value, plus what the chart owns. */}}
{{- define "elastic-autoscaler.settingsFile" -}}
{{- $out := dict "leader_election" .Values.leaderElection.enabled -}}
{{- range $key, $value := .Values.settings -}}
{{- if not (kindIs "invalid" $value) -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Checks that stop a render with a message instead of installing something broken. */}}
{{- define "elastic-autoscaler.validate" -}}
{{- if and (include "elastic-autoscaler.live" .) (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicaCount > 1 in live mode needs leaderElection.enabled=true: two writers would fight over every job" -}}
{{- end -}}
{{- if ge (float64 .Values.settings.lease_renew_deadline_seconds) (float64 .Values.settings.lease_duration_seconds) -}}
{{- fail "settings.lease_renew_deadline_seconds must be below settings.lease_duration_seconds" -}}
{{- end -}}
{{- end -}}

{{/* RBAC -------------------------------------------------------------------------------- */}}

{{/*
The rules of every ClusterRole and Role of deploy/base/rbac.yaml (files/rbac.yaml is a
copy of it, kept equal by deploy/chart/sync_settings.py), by name: the one place RBAC rules are written. YAML out; use fromYaml.
*/}}
{{- define "elastic-autoscaler.rbacSource" -}}
{{- $text := .Files.Get "files/rbac.yaml" -}}
{{- if not $text -}}
{{- fail "files/rbac.yaml is missing or empty: it is a copy of deploy/base/rbac.yaml (python deploy/chart/sync_settings.py)" -}}
{{- end -}}
{{- $known := list "elastic-autoscaler" "elastic-autoscaler-cluster" "elastic-autoscaler-write" "elastic-autoscaler-leader-election" "elastic-autoscaler-status" -}}
{{- $out := dict -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $text -1 -}}
{{- $obj := fromYaml $doc -}}
{{- if and $obj (has (get $obj "kind") (list "ClusterRole" "Role")) -}}
{{- if not (has $obj.metadata.name $known) -}}
{{- fail (printf "deploy/base/rbac.yaml: %s %s is unknown to the chart; put its rules in one of %s (the file's header says which)" $obj.kind $obj.metadata.name (join ", " $known)) -}}
{{- end -}}
{{- $_ := set $out $obj.metadata.name $obj.rules -}}
{{- end -}}
{{- end -}}
{{- range $name := $known -}}
{{- if not (hasKey $out $name) -}}
{{- fail (printf "deploy/base/rbac.yaml has no %s" $name) -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{- define "elastic-autoscaler.subjects" -}}
- kind: ServiceAccount
  name: {{ include "elastic-autoscaler.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}
