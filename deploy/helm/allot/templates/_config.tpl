{{/*
The allotd configuration files. Keys are allotd's (core/config); unknown keys make allotd
refuse to start, and the chart's tests load every example's files with allotd's own loader.
*/}}

{{- define "allot.agentConfig" -}}
{{- $v := .Values -}}
{{- $c := dict
      "mode" "agent"
      "socket" "/run/allot/allotd.sock"
      "store" (dict "path" "/var/lib/allot/allot.db")
      "http" (dict "address" $v.agent.httpAddress)
      "log" (dict "level" $v.log.level "format" $v.log.format) -}}
{{- if $v.monitoring.enabled -}}
{{- $_ := set $c.http "metricsAddress" (printf ":%d" (int $v.monitoring.agentPort)) -}}
{{- end -}}
{{- $_ := set $c "cni" (dict
      "confDir" "/host/etc/cni/net.d"
      "confName" $v.cni.confName
      "conflist" (include "allot.conflistMap" .)
      "binDir" "/host/opt/cni/bin"
      "uninstall" $v.cni.uninstall) -}}
{{- $dp := deepCopy $v.datapath -}}
{{- if include "allot.ipMasqMounted" . -}}
{{- $_ := set $dp "masqAgentConfig" "/etc/allot/ip-masq-agent/config" -}}
{{- end -}}
{{- $_ := set $c "datapath" $dp -}}
{{- $cluster := dict -}}
{{- $nets := include "allot.sharedNetworks" . | fromJsonArray -}}
{{- if $nets -}}
{{- $_ := set $cluster "sharedPools" (dict "networks" $nets) -}}
{{- end -}}
{{- if eq $v.mode "eni" -}}
{{- $_ := set $cluster "eni" (deepCopy $v.eni.config) -}}
{{- /* Host routing gives the secondary ENIs the pods' MTU, as the AWS VPC CNI does. */ -}}
{{- $_ := set $cluster.eni "mtu" (include "allot.eniMTU" . | atoi) -}}
{{- end -}}
{{- if eq $v.mode "clustercidr" -}}
{{- /* The node's pool is its Node's spec.podCIDRs, which the operator writes. */ -}}
{{- $_ := set $cluster "ipam" "kubernetes" -}}
{{- end -}}
{{- if $v.autoDirectNodeRoutes -}}
{{- $_ := set $cluster "autoDirectNodeRoutes" true -}}
{{- end -}}
{{- if $v.clusterPodCIDRs -}}
{{- $_ := set $cluster "podCIDRs" (deepCopy $v.clusterPodCIDRs) -}}
{{- end -}}
{{- if $cluster -}}
{{- $_ := set $c "cluster" $cluster -}}
{{- end -}}
{{- if $v.policy -}}
{{- $_ := set $c "policy" (deepCopy $v.policy) -}}
{{- end -}}
{{- $plugins := include "allot.agentPlugins" . | fromJsonArray -}}
{{- if $plugins -}}
{{- $_ := set $c "plugins" $plugins -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $c (deepCopy $v.agent.extraConfig)) -}}
{{- end -}}

{{- define "allot.operatorConfig" -}}
{{- $v := .Values -}}
{{- $c := dict
      "mode" "operator"
      "http" (dict "address" $v.operator.httpAddress)
      "log" (dict "level" $v.log.level "format" $v.log.format) -}}
{{- if $v.monitoring.enabled -}}
{{- $_ := set $c.http "metricsAddress" (printf ":%d" (int $v.monitoring.operatorPort)) -}}
{{- end -}}
{{- $le := $v.operator.leaderElection -}}
{{- $cluster := dict "leaderElection" (dict
      "namespace" .Release.Namespace
      "name" "allot-operator"
      "leaseDuration" $le.leaseDuration
      "renewDeadline" $le.renewDeadline
      "retryPeriod" $le.retryPeriod) -}}
{{- if eq $v.mode "clustercidr" -}}
{{- $_ := set $cluster "clusterCIDRConfig" true -}}
{{- $_ := set $cluster "disableMultiPool" true -}}
{{- end -}}
{{- if $v.clusterPodCIDRs -}}
{{- $_ := set $cluster "podCIDRs" (deepCopy $v.clusterPodCIDRs) -}}
{{- end -}}
{{- if eq $v.mode "eni" -}}
{{- $_ := set $cluster "eni" (deepCopy $v.eni.config) -}}
{{- if and (eq (toString $v.eni.config.backend) "aws-eni") $v.eni.aws -}}
{{- $_ := set $c "cloud" (dict "backends" (dict "aws-eni" (deepCopy $v.eni.aws))) -}}
{{- end -}}
{{- end -}}
{{- $shared := dict "gc" (deepCopy $v.sharedPools.gc) -}}
{{- if $v.webhook.enabled -}}
{{- $_ := set $shared "webhook" (dict
      "enabled" true
      "address" (printf ":%d" (int $v.webhook.port))
      "certDir" "/etc/allot/webhook-certs"
      "register" false
      "configName" (include "allot.webhookConfigName" .)
      "failurePolicy" $v.webhook.failurePolicy
      "timeoutSeconds" (int $v.webhook.timeoutSeconds)
      "service" (dict "namespace" .Release.Namespace "name" (include "allot.webhookServiceName" .) "port" 443)) -}}
{{- end -}}
{{- $_ := set $cluster "sharedPools" $shared -}}
{{- $_ := set $c "cluster" $cluster -}}
{{- $plugins := include "allot.operatorPlugins" . | fromJsonArray -}}
{{- if $plugins -}}
{{- $_ := set $c "plugins" $plugins -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $c (deepCopy $v.operator.extraConfig)) -}}
{{- end -}}
