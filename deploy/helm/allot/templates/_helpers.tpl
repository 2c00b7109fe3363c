{{/*
Names are fixed (as in Cilium's chart): one allot per cluster (the CRDs, the Lease and the
webhook configuration are cluster-wide), and fixed names let documents and other tools find
the objects.
*/}}

{{- define "allot.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "allot.labels" -}}
helm.sh/chart: {{ include "allot.chart" . }}
app.kubernetes.io/part-of: allot
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "allot.agent.selectorLabels" -}}
app.kubernetes.io/name: allot-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "allot.operator.selectorLabels" -}}
app.kubernetes.io/name: allot-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "allot.image" -}}
{{- $i := .Values.image -}}
{{- if $i.digest -}}
{{- printf "%s@%s" $i.repository $i.digest -}}
{{- else -}}
{{- printf "%s:%s" $i.repository (default (printf "v%s" .Chart.AppVersion) $i.tag) -}}
{{- end -}}
{{- end -}}

{{/* The agent runs in every mode (in clustercidr it serves the Nodes' spec.podCIDRs). */}}
{{- define "allot.agentEnabled" -}}
{{- if .Values.agent.enabled }}true{{ end -}}
{{- end -}}

{{- define "allot.webhookServiceName" -}}allot-operator-webhook{{- end -}}
{{- define "allot.webhookSecretName" -}}allot-operator-webhook-tls{{- end -}}
{{- define "allot.webhookConfigName" -}}allot-shared-pools.allot.io{{- end -}}

{{- define "allot.ipMasqConfigMapName" -}}
{{- default "allot-ip-masq-agent" .Values.ipMasqAgent.configMapName -}}
{{- end -}}

{{/* The datapath reads an ip-masq-agent file only when there is a datapath. */}}
{{- define "allot.ipMasqMounted" -}}
{{- if and .Values.ipMasqAgent.enabled (ne .Values.datapath.type "none") }}true{{ end -}}
{{- end -}}

{{/* host and port of an http.address "host:port" or "[v6]:port". */}}
{{- define "allot.httpHost" -}}
{{- $a := . -}}
{{- if hasPrefix "[" $a -}}
{{- regexReplaceAll "^\\[(.*)\\]:[0-9]+$" $a "${1}" -}}
{{- else -}}
{{- regexReplaceAll ":[0-9]+$" $a "" -}}
{{- end -}}
{{- end -}}
{{- define "allot.httpPort" -}}
{{- regexReplaceAll "^.*:([0-9]+)$" . "${1}" -}}
{{- end -}}

{{/* CNI network names served from shared pools. */}}
{{- define "allot.sharedNetworks" -}}
{{- $nets := .Values.sharedPools.networks -}}
{{- if and (not $nets) (eq .Values.mode "sharedpool") -}}
{{- $nets = list (include "allot.conflistName" .) -}}
{{- end -}}
{{- toJson (default (list) $nets) -}}
{{- end -}}

{{/* The conflist as a map (it may be given as a JSON string; empty: the mode's default). */}}
{{- define "allot.conflistMap" -}}
{{- $c := .Values.cni.conflist -}}
{{- if kindIs "string" $c -}}
{{- $c = fromJson (default "{}" $c) -}}
{{- if hasKey $c "Error" -}}
{{- fail (printf "cni.conflist: not JSON: %s" $c.Error) -}}
{{- end -}}
{{- end -}}
{{- if not $c -}}
{{- $c = include "allot.defaultConflist" . | fromYaml -}}
{{- end -}}
{{- toJson $c -}}
{{- end -}}

{{/*
The default conflist. Masquerading is the agent's datapath (datapath.type), not the
plugins'. Multi-pool, cluster-CIDR, shared pools: a bridge that is the pods' gateway (allot
returns the routes, so isDefaultGateway is false), hairpin mode for a pod reaching itself
through a Service. ENI mode: ptp, a veth per pod whose host side holds the pod's gateway as
a /32 (/128) with a host route to the pod, the AWS VPC CNI's plumbing; the agent's ENI host
routing (eni.config.hostRouting) adds the per-ENI tables and rules. Not hostRoutes: ptp
needs a gateway per address. Its mtu is eni.mtu, the ENI's (9001, as the AWS VPC CNI's pods):
without it ptp's veths get 1500.
*/}}
{{- define "allot.defaultConflist" -}}
cniVersion: "1.0.0"
name: allot
plugins:
{{- if eq .Values.mode "eni" }}
  - type: ptp
    ipMasq: false
    mtu: {{ include "allot.eniMTU" . }}
    ipam:
      type: allot-cni
{{- else }}
  - type: bridge
    bridge: allot0
    isGateway: true
    isDefaultGateway: false
    hairpinMode: true
    ipMasq: false
    ipam:
      type: allot-cni
{{- end }}
  - type: portmap
    capabilities:
      portMappings: true
{{- end -}}

{{/* eni.mtu, checked as the AWS VPC CNI checks AWS_VPC_ENI_MTU (the schema too, unless skipped).
eni.config.mtu is refused rather than merged: the agent's cluster.eni.mtu must be the pods' MTU,
and one value cannot silently win over the other. */}}
{{- define "allot.eniMTU" -}}
{{- if hasKey (.Values.eni.config | default dict) "mtu" -}}
{{- fail "eni.config.mtu: set eni.mtu instead; it gives the pods' interfaces (ptp's mtu) and the secondary ENIs' links (the agent's cluster.eni.mtu) one MTU" -}}
{{- end -}}
{{- $m := .Values.eni.mtu -}}
{{- if not (or (kindIs "float64" $m) (kindIs "int64" $m) (kindIs "int" $m)) -}}
{{- fail (printf "eni.mtu: %v is not an integer" $m) -}}
{{- end -}}
{{- if or (lt (float64 $m) 576.0) (gt (float64 $m) 9001.0) (ne (float64 $m) (float64 (int64 $m))) -}}
{{- fail (printf "eni.mtu: %v is outside 576..9001 (an ENI's MTU range, as the AWS VPC CNI's AWS_VPC_ENI_MTU)" $m) -}}
{{- end -}}
{{- int64 $m -}}
{{- end -}}

{{- define "allot.conflistName" -}}
{{- $c := include "allot.conflistMap" . | fromJson -}}
{{- required "cni.conflist: needs a name (the CNI network name)" $c.name -}}
{{- end -}}

{{/* Plugins split by who loads them: the operator the cloud backends, the agent the rest. */}}
{{- define "allot.agentPlugins" -}}
{{- $out := list -}}
{{- range .Values.plugins -}}
{{- if ne .kind "cloud-backend" }}{{ $out = append $out . }}{{ end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
{{- define "allot.operatorPlugins" -}}
{{- $out := list -}}
{{- range .Values.plugins -}}
{{- if eq .kind "cloud-backend" }}{{ $out = append $out . }}{{ end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Capabilities of the agent: what the datapath needs, plus extraCapabilities. */}}
{{- define "allot.agentCapabilities" -}}
{{- $caps := list -}}
{{- if eq .Values.datapath.type "iptables" -}}
{{- $caps = list "NET_ADMIN" "NET_RAW" -}}
{{- else if eq .Values.datapath.type "ebpf" -}}
{{- $caps = list "NET_ADMIN" "BPF" "PERFMON" -}}
{{- else if ne .Values.datapath.type "none" -}}
{{- /* A datapath plugin runs as a child of the agent: give it what the built-ins have. */ -}}
{{- $caps = list "NET_ADMIN" "NET_RAW" -}}
{{- end -}}
{{- if .Values.autoDirectNodeRoutes -}}
{{- $caps = append $caps "NET_ADMIN" -}}
{{- end -}}
{{- if include "allot.eniHostRouting" . -}}
{{- /* Routes and rules, and entering pods' namespaces to find their veths. */ -}}
{{- $caps = concat $caps (list "NET_ADMIN" "SYS_ADMIN") -}}
{{- end -}}
{{- toJson (concat $caps .Values.agent.extraCapabilities | uniq) -}}
{{- end -}}

{{/* ENI host routing (cluster.eni.hostRouting, on by default in ENI mode): "true" or "". */}}
{{- define "allot.eniHostRouting" -}}
{{- if and (eq .Values.mode "eni") (ne (toString (dig "hostRouting" true .Values.eni.config)) "false") }}true{{ end -}}
{{- end -}}

{{/* ENI mode giving pods IPv6 (cluster.eni.ipv6PrefixDelegation, or the node's): "true" or "". */}}
{{- define "allot.eniIPv6" -}}
{{- $c := .Values.eni.config -}}
{{- if and (eq .Values.mode "eni") (or (eq (toString (dig "ipv6PrefixDelegation" false $c)) "true") (eq (toString (dig "node" "ipv6PrefixDelegation" false $c)) "true")) }}true{{ end -}}
{{- end -}}

{{/* Environment shared by agent and operator. */}}
{{- define "allot.commonEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- if .Values.k8sServiceHost }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .Values.k8sServiceHost | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ default "443" .Values.k8sServicePort | toString | quote }}
{{- end }}
{{- end -}}

{{/* The plugin files volume and its mount, when configured (empty otherwise). */}}
{{- define "allot.pluginVolume" -}}
{{- with .Values.pluginFiles -}}
{{- if .hostPath -}}
- name: plugins
  hostPath:
    path: {{ .hostPath }}
    type: Directory
{{- else if .image.reference -}}
- name: plugins
  image:
    reference: {{ .image.reference }}
    pullPolicy: {{ .image.pullPolicy }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- define "allot.pluginVolumeMount" -}}
{{- if or .Values.pluginFiles.hostPath .Values.pluginFiles.image.reference -}}
- name: plugins
  mountPath: /opt/allot/plugins
  readOnly: true
{{- end -}}
{{- end -}}

{{/* metadata.annotations of the pool objects the chart creates. */}}
{{- define "allot.poolAnnotations" -}}
{{- if .Values.keepPools }}
annotations:
  helm.sh/resource-policy: keep
{{- end }}
{{- end -}}
