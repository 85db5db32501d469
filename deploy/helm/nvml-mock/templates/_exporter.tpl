{{/* The metrics exporter's names and labels: the GPU operator's (app: nvidia-dcgm-exporter). */}}

{{- define "nvml-mock.exporterSelector" -}}
{{ include "nvml-mock.selectorLabels" (dict "root" . "component" "exporter") }}
app: {{ .Values.exporter.name }}
{{- end -}}

{{- define "nvml-mock.exporterLabels" -}}
{{ include "nvml-mock.componentLabels" (dict "root" . "component" "exporter" "version" (include "nvml-mock.imageTag" (dict "root" . "image" .Values.exporter.image))) }}
app: {{ .Values.exporter.name }}
{{- end -}}

{{/* "auto": whether the cluster serves the API; otherwise the value itself. */}}
{{- define "nvml-mock.exporterWants" -}}
{{- $want := index . 0 -}}
{{- $root := index . 1 -}}
{{- if eq (toString $want) "auto" -}}
{{- $root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}
{{- else -}}
{{- $want -}}
{{- end -}}
{{- end -}}
