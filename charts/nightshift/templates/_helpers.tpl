{{- define "nightshift.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nightshift.fullname" -}}
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

{{- define "nightshift.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nightshift.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nightshift.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "nightshift.labels" -}}
{{ include "nightshift.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: nightshift
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "nightshift.chart" . }}
{{- end -}}

{{- define "nightshift.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nightshift.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "nightshift.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "nightshift.runnerImage" -}}
{{- printf "%s:%s" .Values.runnerImage.repository (default .Chart.AppVersion .Values.runnerImage.tag) -}}
{{- end -}}

{{- define "nightshift.catalogPath" -}}
{{- if .Values.config.instanceCatalogVolume -}}
/etc/nightshift/catalog/{{ .Values.config.instanceCatalogFile }}
{{- else -}}
{{- .Values.config.instanceCatalog -}}
{{- end -}}
{{- end -}}

{{- /*
The operator's rules on namespaced resources, one row each in
operator/src/nightshift/kubecalls.py (tests/unit/test_chart_rbac.py checks they match
exactly). Granted by a ClusterRole bound cluster-wide when the operator watches all
namespaces, else by a Role in each watched namespace.
*/ -}}
{{- define "nightshift.namespacedRules" -}}
# PipelineRuns: kopf lists and watches them (one reconcile loop per run) and a pass
# re-reads its run with a GET; a VirtualCluster being deleted lists the runs that
# still use it. The operator never writes a run's spec or metadata.
- apiGroups: [nightshift.io]
  resources: [pipelineruns]
  verbs: [get, list, watch]
# A run's status is the operator's output, written through the status subresource only.
- apiGroups: [nightshift.io]
  resources: [pipelineruns/status]
  verbs: [patch]
# VirtualClusters: kopf lists and watches them (one reconcile loop each), a pass
# re-reads one with a GET, and patch adds and removes our finalizer
# (nightshift.io/virtual-cluster), which holds a deleted VirtualCluster until its
# NodePools, nodes and node classes are gone. Status as for runs.
- apiGroups: [nightshift.io]
  resources: [virtualclusters]
  verbs: [get, list, watch, patch]
- apiGroups: [nightshift.io]
  resources: [virtualclusters/status]
  verbs: [patch]
# SharedStorages: as VirtualClusters (loops, finalizer nightshift.io/shared-storage,
# status). Their observe lists the VirtualCluster a storage names (its pools).
- apiGroups: [nightshift.io]
  resources: [sharedstorages]
  verbs: [get, list, watch, patch]
- apiGroups: [nightshift.io]
  resources: [sharedstorages/status]
  verbs: [patch]
# A run's stages are Indexed Jobs: created by server-side apply (patch, and create for a
# new one), parallelism and suspend changed by merge patch; the watch wakes the run's
# loop. A run's Jobs go with the run through their ownerReferences; delete is for a
# SharedStorage's Gluster volume Job, pruned when the storage no longer renders it.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list, watch, create, patch, delete]
# An mpi stage runs as a Kubeflow MPIJob (server-side apply; suspend by merge patch),
# listed each pass while it runs (no watch: the MPI Operator is optional).
- apiGroups: [kubeflow.org]
  resources: [mpijobs]
  verbs: [list, create, patch]
# A run's items are frozen into ConfigMaps it owns (server-side apply; the list reads
# only their metadata); get reads a forEach.fromConfigMap item list. A SharedStorage's
# configuration (squid.conf, ganesha.conf, mount scripts) too, pruned when unused.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, create, patch, delete]
# Read-only and never all pods: a few failed pods of one Job (exit codes for status),
# a VirtualCluster's unscheduled pipeline pods (the CPU its pools are asked for), and a
# SharedStorage's servers (watched by its label only, never every pod).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
# Read-only: the ServiceAccount a stage names must exist, or its Job would make no pod
# and the run would not say why (the stage waits, naming it).
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get]
# Read-only, by name: the claim a run's pvc storage names must exist, or its pods would
# stay Pending and the run would not say why (the stages that use it wait, naming it).
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get]
# A SharedStorage's workloads (server-side apply, pruned when no longer rendered):
# squid and nfs-ganesha Deployments, Gluster server StatefulSets, CVMFS and Gluster
# client DaemonSets, the squids' autoscaler, its Services and claims. The watches carry
# the label selector nightshift.io/storage and wake the storage's loop.
- apiGroups: [apps]
  resources: [deployments, daemonsets, statefulsets]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: [list, create, patch, delete]
- apiGroups: [""]
  resources: [services, persistentvolumeclaims]
  verbs: [list, create, patch, delete]
# The operator posts its own events on runs, VirtualClusters and SharedStorages (on
# transitions only; kopf's per-handler events are off). It lists a stage Job's
# FailedCreate events (by the Job's uid) only while the Job has had no pod, or fewer
# running than it may, for 30 s (an MPI stage's MPIJobFailed events likewise): why the
# API server refuses its pods (a quota, a LimitRange, Pod Security) is there.
- apiGroups: [""]
  resources: [events]
  verbs: [list, create]
{{- if .Values.rbac.readSecrets }}
# rbac.readSecrets: a run's forEach.fromS3 storage may name a credentialsSecret (S3
# outside AWS); the operator reads it to list the bucket. Only get, never list or
# watch: it reads exactly the Secret a run names.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
{{- end }}
{{- if and .Values.peering.enabled .Values.watchNamespaces }}
# kopf peering of a namespace-restricted operator: one KopfPeering per watched
# namespace, read by every replica, keep-alives written only into ours.
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [list, watch]
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  resourceNames: [{{ .Values.peering.name | quote }}]
  verbs: [patch]
{{- end }}
{{- end -}}
