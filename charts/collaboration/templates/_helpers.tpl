{{- define "collaboration.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{- define "collaboration.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "collaboration.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: nightshift
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "collaboration.chart" . }}
{{- end -}}

{{- /* RBAC subjects from {groups: [...], users: [...]}. */ -}}
{{- define "collaboration.subjects" -}}
{{- range .groups }}
- kind: Group
  apiGroup: rbac.authorization.k8s.io
  name: {{ . | quote }}
{{- end }}
{{- range .users }}
- kind: User
  apiGroup: rbac.authorization.k8s.io
  name: {{ . | quote }}
{{- end }}
{{- end -}}

{{- /* What everyone in the collaboration may read: runs and their status, the
VirtualCluster and storage, the Jobs, pods, logs, item ConfigMaps and events behind a
run (what `kubectl nightshift status/logs/items` reads). */ -}}
{{- define "collaboration.readRules" -}}
- apiGroups: [nightshift.io]
  resources: [pipelineruns, pipelineruns/status, virtualclusters, virtualclusters/status, sharedstorages, sharedstorages/status]
  verbs: [get, list, watch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch]
# An mpi stage runs as a Kubeflow MPIJob (kubectl nightshift items and logs read it).
- apiGroups: [kubeflow.org]
  resources: [mpijobs]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods, configmaps, events]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
{{- end -}}
