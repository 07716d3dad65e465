{{/* Labels on every object: kustomize's two (deploy/base) and Helm's. */}}
{{- define "bmcfence.labels" -}}
app.kubernetes.io/name: bmcfence
app.kubernetes.io/component: fence-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "bmcfence.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if eq $tag "latest" }}{{ fail "image.tag: pin a version (or a digest), never latest" }}{{ end -}}
{{- if .Values.image.digest -}}
{{- if not (hasPrefix "sha256:" .Values.image.digest) }}{{ fail "image.digest: want sha256:<64 hex digits>" }}{{ end -}}
{{ .Values.image.repository }}:{{ $tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{/* The leader Lease's name, as the agent's config has it. */}}
{{- define "bmcfence.leaseName" -}}
{{- $le := default dict .Values.config.leaderElection -}}
{{- default "bmcfence-agent" $le.name -}}
{{- end }}

{{/* The Secrets the inventory reads, one per line (config.Inventory.ReferencedNames). */}}
{{- define "bmcfence.secretNames" -}}
{{- $inv := .Values.inventory -}}
{{- $d := default dict $inv.defaults -}}
{{- $names := list -}}
{{- if and (ne (default "configmap" $inv.source) "metal3") (or $inv.fromAnnotations (empty $inv.nodes)) -}}{{- $names = append $names (default "" $d.credentialsSecret) -}}{{- end -}}
{{- range $inv.nodes -}}{{- $names = append $names (default (default "" $d.credentialsSecret) .credentialsSecret) -}}{{- end -}}
{{- if has (default "configmap" $inv.source) (list "metal3" "both") -}}{{- $names = append $names (default "" (default dict $inv.metal3).kubeconfigSecret) -}}{{- end -}}
{{- range $l := (default list $d.levels) -}}{{- range $l.outlets -}}{{- $names = append $names (default "" .credentialsSecret) -}}{{- end -}}{{- end -}}
{{- range $n := $inv.nodes -}}{{- range $l := (default list $n.levels) -}}{{- range $l.outlets -}}{{- $names = append $names (default "" .credentialsSecret) -}}{{- end -}}{{- end -}}{{- end -}}
{{- $names | compact | uniq | sortAlpha | join "\n" -}}
{{- end }}

{{/* The CA ConfigMaps the inventory reads. A node with insecureSkipVerify reads none. */}}
{{- define "bmcfence.configMapNames" -}}
{{- $inv := .Values.inventory -}}
{{- $d := default dict $inv.defaults -}}
{{- $names := list -}}
{{- if or $inv.fromAnnotations (empty $inv.nodes) (ne (default "configmap" $inv.source) "configmap") -}}{{- $names = append $names (default "" $d.caConfigMap) -}}{{- end -}}
{{- range $inv.nodes -}}
{{- if .caConfigMap }}{{ $names = append $names .caConfigMap }}{{ else if not .insecureSkipVerify }}{{ $names = append $names (default "" $d.caConfigMap) }}{{ end -}}
{{- end -}}
{{- /* The recorded outlet identity proofs, read when any node has fencing levels. */ -}}
{{- $levels := (default list $d.levels) -}}
{{- range $inv.nodes -}}{{- $levels = concat $levels (default list .levels) -}}{{- end -}}
{{- if $levels -}}{{- $names = append $names "bmcfence-outlet-proofs" -}}{{- end -}}
{{- $names | compact | uniq | sortAlpha | join "\n" -}}
{{- end }}
