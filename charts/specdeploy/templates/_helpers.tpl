{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "specdeploy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped name for every object the chart creates. */}}
{{- define "specdeploy.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Names of cluster-scoped objects carry the namespace too: two releases never collide. */}}
{{- define "specdeploy.clusterName" -}}
{{- printf "%s-%s" (include "specdeploy.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specdeploy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specdeploy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "specdeploy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "specdeploy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: specdeploy
{{- end }}

{{- define "specdeploy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specdeploy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "specdeploy.image" -}}
{{- $repository := required "image.repository is required: no specdeploy image is published yet. Build one from the source tree (docker build -t REGISTRY/specdeploy:TAG .), push it and set image.repository (and image.registry)" .Values.image.repository }}
{{- if .Values.image.registry }}
{{- $repository = printf "%s/%s" .Values.image.registry .Values.image.repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "specdeploy.webhookServiceName" -}}
{{- printf "%s-webhook" (include "specdeploy.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specdeploy.webhookSecretName" -}}
{{- printf "%s-webhook-tls" (include "specdeploy.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specdeploy.nodePoolsConfigMapName" -}}
{{- printf "%s-node-pools" (include "specdeploy.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "specdeploy.catalogConfigMapName" -}}
{{- printf "%s-catalog" (include "specdeploy.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Rules for namespaced objects, the same in a ClusterRole (all namespaces) or a Role (one). */}}
{{- define "specdeploy.namespacedRules" -}}
- apiGroups: ["specdeploy.io"]
  resources: ["speculativedeployments"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["specdeploy.io"]
  resources: ["speculativedeployments/status"]
  verbs: ["get", "patch"]
{{- /* Engine pods of replicas that fit one node; delete only when a resource moves to several. */}}
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- /* Engine pods of replicas on several nodes (LeaderWorkerSet groups); delete when one moves back. */}}
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch"]
{{- /* The engine pods' PodDisruptionBudget, server-side apply (create on first apply). */}}
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch"]
{{- /* Read-only: engine pods' failures (crash loop, image pull, OOM) for the Degraded condition. */}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- /* Read-only: the end of a crashed engine run's log, once per run, for its root cause. */}}
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  # patch: a repeated Event raises its count (aggregation) instead of adding another.
  verbs: ["create", "patch"]
{{- if .Values.rbac.readTokenSecrets }}
{{- /* Opt-in: the hub token Secret a resource names, for the pairing check's downloads. */}}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
{{- end }}

{{/* Cluster-scoped reads: GPU inventory from nodes; kopf watches CRDs to notice resource changes. */}}
{{- define "specdeploy.clusterRules" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
- apiGroups: ["karpenter.sh"]
  resources: ["nodepools"]
  verbs: ["list", "watch"]
{{- end }}

{{- define "specdeploy.subject" -}}
- kind: ServiceAccount
  name: {{ include "specdeploy.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
Non-empty when the operator runs with leader election: asked for, or implied by replicas > 1.
*/}}
{{- define "specdeploy.leaderElection" -}}
{{- if or .Values.leaderElection.enabled (gt (int (include "specdeploy.replicas" .)) 1) -}}true{{- end -}}
{{- end }}

{{/* Operator replicas: replicaCount, or the former `replicas` when a values file still sets it. */}}
{{- define "specdeploy.replicas" -}}
{{- if hasKey .Values "replicas" }}{{ .Values.replicas }}{{ else }}{{ .Values.replicaCount }}{{ end -}}
{{- end }}
