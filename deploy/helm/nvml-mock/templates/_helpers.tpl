{{/*
Names, labels, image references and the checks that JSON Schema cannot express.
*/}}

{{- define "nvml-mock.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Kept short enough that "<fullname>-topology" is still a valid name (63). */}}
{{- define "nvml-mock.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "nvml-mock.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nvml-mock.commonLabels" -}}
helm.sh/chart: {{ include "nvml-mock.chart" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nvml-mock
{{- end -}}

{{- define "nvml-mock.labels" -}}
{{ include "nvml-mock.commonLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Selector labels per component: (dict "root" $ "component" "staging|nri|topology"). */}}
{{- define "nvml-mock.selectorLabels" -}}
{{- $root := .root -}}
{{- if eq .component "staging" -}}
app.kubernetes.io/name: {{ include "nvml-mock.name" $root }}
{{- else -}}
app.kubernetes.io/name: {{ printf "%s-%s" (include "nvml-mock.name" $root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "nvml-mock.componentLabels" -}}
{{ include "nvml-mock.commonLabels" .root }}
{{ include "nvml-mock.selectorLabels" . }}
app.kubernetes.io/version: {{ .version | toString | quote }}
{{- end -}}

{{/*
An image reference: (dict "root" $ "image" <component image values>). The component's values are
merged over the top-level `image`, so registry, pullPolicy and digest are inherited.
*/}}
{{- define "nvml-mock.imageValues" -}}
{{- $base := pick .root.Values.image "registry" "pullPolicy" -}}
{{- $img := mergeOverwrite (deepCopy $base) (deepCopy (default (dict) .image)) -}}
{{- toYaml $img -}}
{{- end -}}

{{- define "nvml-mock.image" -}}
{{- $img := include "nvml-mock.imageValues" . | fromYaml -}}
{{- $ref := $img.repository -}}
{{- if $img.registry -}}
{{- $ref = printf "%s/%s" (trimSuffix "/" $img.registry) $img.repository -}}
{{- end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $ref $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $ref (toString $img.tag) -}}
{{- end -}}
{{- end -}}

{{- define "nvml-mock.imagePullPolicy" -}}
{{- $img := include "nvml-mock.imageValues" . | fromYaml -}}
{{- default "IfNotPresent" $img.pullPolicy -}}
{{- end -}}

{{- define "nvml-mock.imageTag" -}}
{{- $img := include "nvml-mock.imageValues" . | fromYaml -}}
{{- toString $img.tag -}}
{{- end -}}

{{/*
Pod template labels: no chart version, so upgrading the chart alone restarts nothing.
*/}}
{{- define "nvml-mock.podLabels" -}}
{{ include "nvml-mock.selectorLabels" . }}
app.kubernetes.io/part-of: nvml-mock
app.kubernetes.io/version: {{ .version | toString | quote }}
{{- end -}}

{{- define "nvml-mock.serviceAccountName" -}}
{{- printf "%s-%s" (include "nvml-mock.fullname" .root) .component -}}
{{- end -}}

{{- define "nvml-mock.cdiSpecPath" -}}
{{- printf "%s/nvml-mock-nri.yaml" (trimSuffix "/" .Values.nri.cdiSpecDir) -}}
{{- end -}}

{{- define "nvml-mock.topologyURL" -}}
{{- if .Values.topology.enabled -}}
{{- printf "http://%s-topology.%s.svc:%d" (include "nvml-mock.fullname" .) .Release.Namespace (int .Values.topology.port) -}}
{{- end -}}
{{- end -}}

{{/* The release namespace and kube-system are always excluded, then the configured ones. */}}
{{- define "nvml-mock.excludedNamespaces" -}}
{{- $ns := list .Release.Namespace "kube-system" -}}
{{- range .Values.nri.excludedNamespaces -}}
{{- $ns = append $ns . -}}
{{- end -}}
{{- join "," (uniq $ns) -}}
{{- end -}}

{{/*
The topology document as the topology service reads it. Cross-item rules that JSON Schema
cannot state are checked here so a bad document fails `helm install`, not the service:
unique domain names and uuids, unique clique ids within a domain, each node in one clique.
*/}}
{{- define "nvml-mock.topologyDocument" -}}
{{- $seenNodes := dict -}}
{{- $seenNames := dict -}}
{{- $seenUUIDs := dict -}}
{{- range $d := .Values.topology.domains -}}
{{- if hasKey $seenNames $d.name -}}
{{- fail (printf "topology.domains: domain name %q appears twice" $d.name) -}}
{{- end -}}
{{- $_ := set $seenNames $d.name true -}}
{{- $uuid := lower $d.uuid -}}
{{- if hasKey $seenUUIDs $uuid -}}
{{- fail (printf "topology.domains: uuid %q is used by domains %q and %q" $d.uuid (get $seenUUIDs $uuid) $d.name) -}}
{{- end -}}
{{- $_ := set $seenUUIDs $uuid $d.name -}}
{{- $seenIDs := dict -}}
{{- range $c := $d.cliques -}}
{{- $id := toString (int64 $c.id) -}}
{{- if hasKey $seenIDs $id -}}
{{- fail (printf "topology.domains: domain %q has clique id %s twice" $d.name $id) -}}
{{- end -}}
{{- $_ := set $seenIDs $id true -}}
{{- range $n := $c.nodes -}}
{{- $here := printf "domain %q clique %s" $d.name $id -}}
{{- if hasKey $seenNodes $n -}}
{{- if eq (get $seenNodes $n) $here -}}
{{- fail (printf "topology.domains: node %q is listed twice in %s" $n $here) -}}
{{- end -}}
{{- fail (printf "topology.domains: node %q is in %s and in %s; each node belongs to one clique" $n (get $seenNodes $n) $here) -}}
{{- end -}}
{{- $_ := set $seenNodes $n $here -}}
{{- end -}}
{{- end -}}
{{- end -}}
version: 1
domains:
{{- if .Values.topology.domains }}
{{- range $d := .Values.topology.domains }}
  - name: {{ $d.name | quote }}
    uuid: {{ $d.uuid | quote }}
    cliques:
{{- range $c := $d.cliques }}
      - id: {{ int64 $c.id }}
        nodes:
{{- range $n := $c.nodes }}
          - {{ $n | quote }}
{{- else }} []
{{- end }}
{{- else }} []
{{- end }}
{{- end }}
{{- else }} []
{{- end }}
{{ end -}}

{{/* The label the stager sets beside nvidia.com/gpu.present, so the two can be told apart. */}}
{{- define "nvml-mock.stagedLabel" -}}
nvml-mock.nvidia.com/staged
{{- end -}}

{{/* What the stager labels its node with (CSV of KEY=VALUE); empty makes no API call. */}}
{{- define "nvml-mock.nodeLabels" -}}
{{- if .Values.nodeLabels.gpuPresent -}}
{{- printf "nvidia.com/gpu.present=true,%s=true" (include "nvml-mock.stagedLabel" .) -}}
{{- end -}}
{{- end -}}

{{/*
The affinity of the DaemonSets: `affinity` with, when realGpuNodes.avoid, a required node
affinity that keeps them off real GPU nodes. A node is a real GPU node when one of
realGpuNodes.labels is "true" on it, except nvidia.com/gpu.present on a node that also carries
the stager's own staged label (the stager sets both in one patch). With fakeNodes.avoid every
term also keeps off fake nodes (one of fakeNodes.labels has its value there): KWOK plays a pod
bound to one as Running without starting it, so a DaemonSet would count pods that do nothing.
The user's required terms are ANDed with these: each of their terms is combined with each of
ours.
*/}}
{{- define "nvml-mock.daemonAffinity" -}}
{{- $affinity := deepCopy (default (dict) .Values.affinity) -}}
{{- $ours := list -}}
{{- if .Values.realGpuNodes.avoid -}}
{{- $real := .Values.realGpuNodes.labels -}}
{{- $noneReal := list -}}
{{- range $real -}}
{{- $noneReal = append $noneReal (dict "key" . "operator" "NotIn" "values" (list "true")) -}}
{{- end -}}
{{- $ours = list (dict "matchExpressions" $noneReal) -}}
{{- if .Values.nodeLabels.gpuPresent -}}
{{- $staged := list (dict "key" (include "nvml-mock.stagedLabel" .) "operator" "In" "values" (list "true")) -}}
{{- range $real -}}
{{- if ne . "nvidia.com/gpu.present" -}}
{{- $staged = append $staged (dict "key" . "operator" "NotIn" "values" (list "true")) -}}
{{- end -}}
{{- end -}}
{{- $ours = append $ours (dict "matchExpressions" $staged) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.fakeNodes.avoid .Values.fakeNodes.labels -}}
{{- $notFake := list -}}
{{- range $key := keys .Values.fakeNodes.labels | sortAlpha -}}
{{- $notFake = append $notFake (dict "key" $key "operator" "NotIn" "values" (list (get $.Values.fakeNodes.labels $key | toString))) -}}
{{- end -}}
{{- if $ours -}}
{{- $terms := list -}}
{{- range $o := $ours -}}
{{- $terms = append $terms (dict "matchExpressions" (concat $o.matchExpressions $notFake)) -}}
{{- end -}}
{{- $ours = $terms -}}
{{- else -}}
{{- $ours = list (dict "matchExpressions" $notFake) -}}
{{- end -}}
{{- end -}}
{{- if $ours -}}
{{- $node := default (dict) $affinity.nodeAffinity -}}
{{- $required := default (dict) (get $node "requiredDuringSchedulingIgnoredDuringExecution") -}}
{{- $terms := $ours -}}
{{- with $required.nodeSelectorTerms -}}
{{- $terms = list -}}
{{- range $theirs := . -}}
{{- range $o := $ours -}}
{{- $both := concat (default (list) $theirs.matchExpressions) $o.matchExpressions -}}
{{- $terms = append $terms (set (deepCopy $theirs) "matchExpressions" $both) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $_ := set $required "nodeSelectorTerms" $terms -}}
{{- $_ := set $node "requiredDuringSchedulingIgnoredDuringExecution" $required -}}
{{- $_ := set $affinity "nodeAffinity" $node -}}
{{- end -}}
{{- if $affinity -}}
{{- toYaml $affinity -}}
{{- end -}}
{{- end -}}

{{/* The namespaces whose pods may opt in to device nodes (CSV; empty: none). */}}
{{- define "nvml-mock.deviceNamespaces" -}}
{{- join "," (uniq .Values.nri.deviceNamespaces) -}}
{{- end -}}

{{/* Scenarios need the topology service: it serves them. */}}
{{- define "nvml-mock.scenariosEnabled" -}}
{{- if and .Values.topology.enabled .Values.scenarios.enabled -}}true{{- end -}}
{{- end -}}

{{- define "nvml-mock.scenarioTokenSecret" -}}
{{- .Values.scenarios.writeToken.existingSecret | default (printf "%s-scenario-token" (include "nvml-mock.fullname" .)) -}}
{{- end -}}

{{/* The agent's node labels as KEY=VALUE,... (sorted). */}}
{{- define "nvml-mock.agentLabels" -}}
{{- $items := list -}}
{{- range $key, $value := . -}}
{{- $items = append $items (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- join "," $items -}}
{{- end -}}
