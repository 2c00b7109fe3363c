package chart

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/core/masqconfig"
)

// variantCases check values the examples do not cover.
func variantCases() []valuesCase {
	return []valuesCase{
		{name: "webhook-cert-manager", file: "sharedpool.yaml", set: []string{"webhook.certManager.enabled=true"}},
		{name: "webhook-cert-manager-issuer", file: "sharedpool.yaml", set: []string{
			"webhook.certManager.enabled=true", "webhook.certManager.issuerRef.name=corp-ca", "webhook.certManager.issuerRef.kind=ClusterIssuer"}},
		{name: "privileged", set: []string{"agent.privileged=true"}},
		{name: "extra-caps", file: "ebpf.yaml", set: []string{"agent.extraCapabilities={SYS_ADMIN,BPF}"}},
		{name: "datapath-none", set: []string{"datapath.type=none"}},
		{name: "single-operator-soft", set: []string{"operator.replicas=1", "operator.podAntiAffinity=soft"}},
		{name: "k8s-service", set: []string{"k8sServiceHost=10.0.0.1", "k8sServicePort=6443"}},
		{name: "conflist-json", values: `cni:
  conflist: '{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge","bridge":"cbr0","isGateway":true,"ipam":{"type":"allot-cni"}}]}'
`},
		{name: "plugins-hostpath", set: []string{
			"pluginFiles.hostPath=/opt/allot-plugins",
			"plugins[0].name=by-team", "plugins[0].kind=pool-policy", "plugins[0].transport=wasm",
			"plugins[0].path=/opt/allot/plugins/by-team.wasm", "plugins[0].sha256=" + strings.Repeat("ab", 32),
			"plugins[1].name=my-cloud", "plugins[1].kind=cloud-backend", "plugins[1].transport=process",
			"plugins[1].path=/opt/allot/plugins/my-cloud", "plugins[1].sha256=" + strings.Repeat("cd", 32),
			"policy.default.chain={by-team,cilium-annotations}",
		}},
		{name: "plugins-image", set: []string{
			"pluginFiles.image.reference=registry.example/allot-plugins:v1",
			"plugins[0].name=by-team", "plugins[0].kind=pool-policy", "plugins[0].transport=wasm",
			"plugins[0].path=/opt/allot/plugins/by-team.wasm", "plugins[0].sha256=" + strings.Repeat("ab", 32),
		}},
		{name: "eni-plugin-backend", file: "aws-eni.yaml", set: []string{
			"eni.config.backend=my-cloud", "pluginFiles.hostPath=/opt/allot-plugins",
			"plugins[0].name=my-cloud", "plugins[0].kind=cloud-backend", "plugins[0].transport=process",
			"plugins[0].path=/opt/allot/plugins/my-cloud", "plugins[0].sha256=" + strings.Repeat("cd", 32),
		}},
		{name: "shared-networks-in-multipool", set: []string{"sharedPools.networks={underlay}"}},
		{name: "clustercidr-webhook", file: "clustercidr.yaml", set: []string{"webhook.enabled=true"}},
		{name: "island-multipool", set: []string{"clusterPodCIDRs={10.244.0.0/16,fd00:10:244::/56}"}},
		{name: "monitoring", file: "aws-eni.yaml", set: monitoringSet},
		{name: "monitoring-multipool", set: monitoringSet},
		{name: "no-flowschema", set: []string{"apiPriorityAndFairness.enabled=false"}},
		{name: "eni-mtu", file: "aws-eni.yaml", set: []string{"eni.mtu=1500"}},
		{name: "eni-ipv6", file: "aws-eni.yaml", set: []string{"eni.config.ipv6PrefixDelegation=true"}},
		{name: "eni-ipv6-node", file: "aws-eni.yaml", set: []string{"eni.config.node.ipv6PrefixDelegation=true"}},
		{name: "eni-ipv6-accept-ra-off", file: "aws-eni.yaml", set: []string{"eni.config.ipv6PrefixDelegation=true", "eni.acceptRA=false"}},
		{name: "eni-ipv6-off", file: "aws-eni.yaml", set: []string{"eni.config.ipv6PrefixDelegation=false", "eni.config.prefixDelegation=true"}},
		{name: "ipv6-prefix-outside-eni", set: []string{"eni.config.ipv6PrefixDelegation=true"}},
		{name: "eni-every-key", file: "aws-eni.yaml", values: eniEveryKey},
	}
}

func allCases(t *testing.T) []valuesCase { return append(exampleCases(t), variantCases()...) }

// TestChartLintStrict runs `helm lint --strict` with the defaults and every example.
func TestChartLintStrict(t *testing.T) {
	for _, c := range allCases(t) {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", chartDir(t), "--namespace", Namespace}, c.args(t)...)
			out := runHelm(t, nil, args...)
			if !bytes.Contains(out, []byte("0 chart(s) failed")) {
				t.Fatalf("helm lint:\n%s", out)
			}
		})
	}
}

// TestChartSchemaRefusesTypos: values.schema.json must make a misspelt key fail, at any depth
// the chart owns, and refuse values allotd would refuse.
func TestChartSchemaRefusesTypos(t *testing.T) {
	for _, set := range []string{
		"agent.enabeld=true",
		"datapath.tpye=iptables",
		"cni.hostConfdir=/etc/cni",
		"operator.replica=3",
		"eni.config.preAllocat=4",
		"eni.config.nodeConfigs.a.subnetID={subnet-1}",
		"eni.config.node.securityGroupTag.tier=pods",
		"eni.config.gcInterval=300",
		"eni.config.firstInterfaceIndex=65",
		"eni.aws.regin=eu-west-1",
		"ipMasqAgent.config.nonMasqueradeCIDR={10.0.0.0/8}",
		"pools[0].name=default", // no family
		"mode=multi-pool",
		"cni.uninstall=sometimes",
		"webhook.failurePolicy=fail",
		"agent.httpAddress=localhost",
		"plugins[0].name=x",
	} {
		t.Run(set, func(t *testing.T) {
			_, err := tryHelm(t, nil, "lint", "--strict", chartDir(t), "--set", set)
			if err == nil {
				t.Fatalf("helm lint accepted --set %s", set)
			}
		})
	}
}

// TestChartENIMTURefused: eni.mtu outside 576..9001 (the AWS VPC CNI's AWS_VPC_ENI_MTU range)
// is refused by the schema, and by the template naming the field when the schema is skipped.
func TestChartENIMTURefused(t *testing.T) {
	for _, mtu := range []string{"575", "9216"} {
		c := valuesCase{file: "aws-eni.yaml", set: []string{"eni.mtu=" + mtu}}
		args := append([]string{"template", ReleaseName, chartDir(t), "--namespace", Namespace}, c.args(t)...)
		if _, err := tryHelm(t, nil, args...); err == nil || !strings.Contains(err.Error(), "/eni/mtu") {
			t.Errorf("eni.mtu=%s: %v, want the schema to refuse /eni/mtu", mtu, err)
		}
		_, err := tryHelm(t, nil, append(args, "--skip-schema-validation")...)
		if want := "eni.mtu: " + mtu + " is outside 576..9001"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("eni.mtu=%s without the schema: %v, want %q", mtu, err, want)
		}
	}
}

// TestChartTemplate renders every case, decodes every object into its Go type strictly (an
// unknown field is an error) and checks what the chart promises, as for the oldest Kubernetes
// it admits.
func TestChartTemplate(t *testing.T) {
	for _, c := range allCases(t) {
		t.Run(c.name, func(t *testing.T) {
			docs := decodeStrict(t, template(t, c, kubeVersionArgs(t)...))
			vals := effectiveValues(t, c)
			checkNamespaces(t, docs)
			checkReferences(t, docs)
			checkAgent(t, docs, vals)
			checkOperator(t, docs, vals)
			checkWebhook(t, docs, vals)
			checkPools(t, docs, vals)
			checkClusterPodCIDRs(t, docs, vals)
			checkFlowSchema(t, docs, vals)
			checkServedAtFloor(t, docs)
		})
	}
}

// values is the subset of the chart's values the checks need, as helm computed them.
type values struct {
	Mode     string `json:"mode"`
	Datapath struct {
		Type string `json:"type"`
	} `json:"datapath"`
	CNI struct {
		HostConfDir    string   `json:"hostConfDir"`
		HostBinDir     string   `json:"hostBinDir"`
		InstallPlugins []string `json:"installPlugins"`
		Uninstall      string   `json:"uninstall"`
		Conflist       any      `json:"conflist"`
	} `json:"cni"`
	IPMasqAgent struct {
		Enabled bool           `json:"enabled"`
		Config  map[string]any `json:"config"`
	} `json:"ipMasqAgent"`
	K8sServiceHost string `json:"k8sServiceHost"`
	K8sServicePort any    `json:"k8sServicePort"`
	Pools          []struct {
		Name string `json:"name"`
	} `json:"pools"`
	KeepPools       bool     `json:"keepPools"`
	ClusterPodCIDRs []string `json:"clusterPodCIDRs"`
	SharedPools     struct {
		Networks []string `json:"networks"`
		Pools    []struct {
			Name string `json:"name"`
		} `json:"pools"`
	} `json:"sharedPools"`
	ENI struct {
		MTU        int    `json:"mtu"`
		IAMRoleArn string `json:"iamRoleArn"`
		AcceptRA   bool   `json:"acceptRA"`
		Config     struct {
			HostRouting          *bool `json:"hostRouting"`
			IPv6PrefixDelegation bool  `json:"ipv6PrefixDelegation"`
			Node                 struct {
				IPv6PrefixDelegation bool `json:"ipv6PrefixDelegation"`
			} `json:"node"`
		} `json:"config"`
	} `json:"eni"`
	PluginFiles struct {
		HostPath string `json:"hostPath"`
		Image    struct {
			Reference string `json:"reference"`
		} `json:"image"`
	} `json:"pluginFiles"`
	Agent struct {
		Enabled           bool     `json:"enabled"`
		Privileged        bool     `json:"privileged"`
		HTTPAddress       string   `json:"httpAddress"`
		ExtraCapabilities []string `json:"extraCapabilities"`
	} `json:"agent"`
	Operator struct {
		Enabled         bool   `json:"enabled"`
		Replicas        int32  `json:"replicas"`
		HTTPAddress     string `json:"httpAddress"`
		PodAntiAffinity string `json:"podAntiAffinity"`
	} `json:"operator"`
	APF struct {
		Enabled bool `json:"enabled"`
	} `json:"apiPriorityAndFairness"`
	Webhook struct {
		Enabled     bool  `json:"enabled"`
		Port        int32 `json:"port"`
		CertManager struct {
			Enabled bool `json:"enabled"`
		} `json:"certManager"`
	} `json:"webhook"`
}

func (v values) agentEnabled() bool { return v.Agent.Enabled }

// isEmpty: a value left empty ({} or ""), as the chart's `if not` reads it.
func isEmpty(x any) bool {
	switch x := x.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// eniHostRouting: the agent sets up ENI host routing (cluster.eni.hostRouting, on by default).
func (v values) eniHostRouting() bool {
	return v.Mode == "eni" && (v.ENI.Config.HostRouting == nil || *v.ENI.Config.HostRouting)
}

// eniIPv6: ENI mode gives pods IPv6 (the cluster's or the node's ipv6PrefixDelegation).
func (v values) eniIPv6() bool {
	return v.Mode == "eni" && (v.ENI.Config.IPv6PrefixDelegation || v.ENI.Config.Node.IPv6PrefixDelegation)
}

// effectiveValues asks helm for the values it renders with (defaults merged with the case's),
// through the chart itself, so the checks never disagree with helm's merging.
func effectiveValues(t *testing.T, c valuesCase) values {
	t.Helper()
	dir := t.TempDir()
	// A throwaway copy of the chart whose only template prints .Values.
	if err := os.CopyFS(dir, os.DirFS(chartDir(t))); err != nil {
		t.Fatal(err)
	}
	tpl := filepath.Join(dir, "templates")
	if err := os.RemoveAll(tpl); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(tpl, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tpl, "values.yaml"), []byte("# {{ .Values | toJson }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"template", ReleaseName, dir, "--namespace", Namespace}, c.args(t)...)
	out := runHelm(t, nil, args...)
	i := bytes.Index(out, []byte("# {"))
	if i < 0 {
		t.Fatalf("no values in:\n%s", out)
	}
	line := out[i+2:]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	var v values
	if err := json.Unmarshal(line, &v); err != nil {
		t.Fatalf("values: %v\n%s", err, line)
	}
	return v
}

var clusterScoped = map[string]bool{
	"ClusterRole": true, "ClusterRoleBinding": true, "CustomResourceDefinition": true,
	"ValidatingWebhookConfiguration": true, "ValidatingAdmissionPolicy": true,
	"ValidatingAdmissionPolicyBinding": true, "IPPool": true, "ClusterCIDRConfig": true,
	"SharedIPPool": true, "ReservedIP": true, "FlowSchema": true,
}

func checkNamespaces(t *testing.T, docs []doc) {
	t.Helper()
	seen := map[string]bool{}
	for _, d := range docs {
		key := d.gvk.Kind + "/" + d.ns + "/" + d.name
		if seen[key] {
			t.Errorf("%s rendered twice", key)
		}
		seen[key] = true
		if clusterScoped[d.gvk.Kind] {
			if d.ns != "" {
				t.Errorf("%s %s is cluster-scoped but has namespace %q", d.gvk.Kind, d.name, d.ns)
			}
		} else if d.ns != Namespace {
			t.Errorf("%s %s: namespace %q, want the release namespace %s", d.gvk.Kind, d.name, d.ns, Namespace)
		}
	}
}

// checkReferences: every ServiceAccount, ConfigMap and Secret a pod uses, every Role a binding
// names and every ServiceAccount it binds are rendered too; selectors select their pods.
func checkReferences(t *testing.T, docs []doc) {
	t.Helper()
	has := func(kind, name string) bool {
		for _, d := range docs {
			if d.gvk.Kind == kind && d.name == name {
				return true
			}
		}
		return false
	}
	pods := map[string]corev1.PodTemplateSpec{}
	for _, d := range docs {
		switch o := d.obj.(type) {
		case *appsv1.DaemonSet:
			pods[d.name] = o.Spec.Template
			checkSelector(t, d.name, o.Spec.Selector, o.Spec.Template.Labels)
		case *appsv1.Deployment:
			pods[d.name] = o.Spec.Template
			checkSelector(t, d.name, o.Spec.Selector, o.Spec.Template.Labels)
		case *rbacv1.ClusterRoleBinding:
			if !has(o.RoleRef.Kind, o.RoleRef.Name) {
				t.Errorf("ClusterRoleBinding %s: %s %s is not rendered", d.name, o.RoleRef.Kind, o.RoleRef.Name)
			}
			for _, s := range o.Subjects {
				if s.Kind != "ServiceAccount" || s.Namespace != Namespace || !has("ServiceAccount", s.Name) {
					t.Errorf("ClusterRoleBinding %s: subject %+v is not a rendered ServiceAccount", d.name, s)
				}
			}
		case *rbacv1.RoleBinding:
			if o.RoleRef.Kind != "Role" || !has("Role", o.RoleRef.Name) {
				t.Errorf("RoleBinding %s: %s %s is not a rendered Role", d.name, o.RoleRef.Kind, o.RoleRef.Name)
			}
			for _, s := range o.Subjects {
				if s.Kind != "ServiceAccount" || !has("ServiceAccount", s.Name) {
					t.Errorf("RoleBinding %s: subject %+v is not a rendered ServiceAccount", d.name, s)
				}
			}
		}
	}
	for name, p := range pods {
		if !has("ServiceAccount", p.Spec.ServiceAccountName) {
			t.Errorf("%s: serviceAccountName %q is not rendered", name, p.Spec.ServiceAccountName)
		}
		if p.Spec.AutomountServiceAccountToken != nil && !*p.Spec.AutomountServiceAccountToken {
			t.Errorf("%s: needs its ServiceAccount token", name)
		}
		for _, v := range p.Spec.Volumes {
			switch {
			case v.ConfigMap != nil && (v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional):
				if !has("ConfigMap", v.ConfigMap.Name) {
					t.Errorf("%s: volume %s: ConfigMap %s is not rendered", name, v.Name, v.ConfigMap.Name)
				}
			case v.Secret != nil:
				// cert-manager writes the Secret of a Certificate.
				if !has("Secret", v.Secret.SecretName) && !has("Certificate", "allot-operator-webhook") {
					t.Errorf("%s: volume %s: Secret %s is neither rendered nor issued", name, v.Name, v.Secret.SecretName)
				}
			}
		}
		mounts := map[string]bool{}
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			for _, m := range c.VolumeMounts {
				mounts[m.Name] = true
				if !slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
					t.Errorf("%s/%s: mount of unknown volume %s", name, c.Name, m.Name)
				}
			}
		}
		for _, v := range p.Spec.Volumes {
			if !mounts[v.Name] {
				t.Errorf("%s: volume %s is mounted nowhere", name, v.Name)
			}
		}
	}
}

func checkSelector(t *testing.T, name string, sel *metav1.LabelSelector, podLabels map[string]string) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() || !s.Matches(labels.Set(podLabels)) {
		t.Errorf("%s: selector %v does not select its pods %v (%v)", name, sel, podLabels, err)
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// checkAcceptRA: in ENI mode with IPv6, and only there, a privileged init container sets the
// primary ENI's accept_ra (allotd accept-ra), unless eni.acceptRA is false; no other container
// is privileged unless agent.privileged asks for it.
func checkAcceptRA(t *testing.T, spec corev1.PodSpec, v values) {
	t.Helper()
	i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == "accept-ra" })
	if want := v.eniIPv6() && v.ENI.AcceptRA; (i >= 0) != want {
		t.Fatalf("accept-ra init container rendered: %v, want %v (mode %s, ENI IPv6 %v, eni.acceptRA %v)", i >= 0, want, v.Mode, v.eniIPv6(), v.ENI.AcceptRA)
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		sc := c.SecurityContext
		privileged := sc != nil && sc.Privileged != nil && *sc.Privileged
		if want := v.Agent.Privileged || c.Name == "accept-ra"; privileged != want {
			t.Errorf("agent pod: container %s privileged %v, want %v", c.Name, privileged, want)
		}
	}
	if i < 0 {
		return
	}
	c := spec.InitContainers[i]
	if got := append(slices.Clone(c.Command), c.Args...); !slices.Equal(got, []string{"/usr/local/bin/allotd", "accept-ra"}) {
		t.Errorf("accept-ra: runs %v, want allotd accept-ra", got)
	}
	if len(c.VolumeMounts) != 0 {
		t.Errorf("accept-ra: mounts %v, wants none (the host's /proc/sys/net through hostNetwork)", c.VolumeMounts)
	}
	if !spec.HostNetwork {
		t.Errorf("accept-ra: needs the host's network namespace, whose sysctls it sets")
	}
}

func hostPort(t *testing.T, addr string) (string, int32) {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatalf("http address %q: %v", addr, err)
	}
	return ap.Addr().String(), int32(ap.Port())
}

func checkProbe(t *testing.T, what string, p *corev1.Probe, path, host string, port int32) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP probe", what)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Host != host || p.HTTPGet.Port.IntValue() != int(port) {
		t.Errorf("%s: probes %s:%s%s, want %s:%d%s", what, p.HTTPGet.Host, p.HTTPGet.Port.String(), p.HTTPGet.Path, host, port, path)
	}
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

func checkDownwardEnv(t *testing.T, what string, c corev1.Container, v values) {
	t.Helper()
	env := envOf(c)
	for name, field := range map[string]string{"NODE_NAME": "spec.nodeName", "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"} {
		e, ok := env[name]
		if !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
			t.Errorf("%s: env %s must come from the downward API field %s: %+v", what, name, field, e)
		}
	}
	h, hasHost := env["KUBERNETES_SERVICE_HOST"]
	p, hasPort := env["KUBERNETES_SERVICE_PORT"]
	switch {
	case v.K8sServiceHost == "" && (hasHost || hasPort):
		t.Errorf("%s: KUBERNETES_SERVICE_HOST/PORT set without k8sServiceHost", what)
	case v.K8sServiceHost != "":
		wantPort := "443"
		if v.K8sServicePort != nil && fmt.Sprint(v.K8sServicePort) != "" {
			wantPort = fmt.Sprint(v.K8sServicePort)
		}
		if h.Value != v.K8sServiceHost || p.Value != wantPort {
			t.Errorf("%s: KUBERNETES_SERVICE_HOST/PORT %q/%q, want %q/%q", what, h.Value, p.Value, v.K8sServiceHost, wantPort)
		}
	}
}

func checkAgent(t *testing.T, docs []doc, v values) {
	t.Helper()
	ds, ok := lookup[*appsv1.DaemonSet](docs, "allot-agent")
	if ok != v.agentEnabled() {
		t.Fatalf("agent DaemonSet rendered: %v, want %v (mode %s)", ok, v.agentEnabled(), v.Mode)
	}
	if !ok {
		return
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("agent: hostNetwork %v dnsPolicy %s", spec.HostNetwork, spec.DNSPolicy)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("agent: priorityClassName %q", spec.PriorityClassName)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Operator == corev1.TolerationOpExists && tl.Key == "" && tl.Effect == ""
	}) {
		t.Errorf("agent: must tolerate every taint: %+v", spec.Tolerations)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ds.Spec.UpdateStrategy.RollingUpdate == nil ||
		ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable == nil {
		t.Errorf("agent: update strategy %+v", ds.Spec.UpdateStrategy)
	}
	if spec.TerminationGracePeriodSeconds == nil {
		t.Errorf("agent: no terminationGracePeriodSeconds")
	}
	if ds.Spec.Template.Annotations["checksum/config"] == "" {
		t.Errorf("agent: no checksum/config annotation: a config change would not roll the agents")
	}

	install := container(t, spec, "install-cni")
	wantArgs := []string{"install-cni", "--bin-dir", "/host/opt/cni/bin", "--plugins", strings.Join(v.CNI.InstallPlugins, ",")}
	if !slices.Equal(append(install.Command[1:], install.Args...), wantArgs) || install.Command[0] != "/usr/local/bin/allotd" {
		t.Errorf("install-cni: %v %v, want allotd %v", install.Command, install.Args, wantArgs)
	}
	if !slices.ContainsFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == "install-cni" }) {
		t.Errorf("install-cni must be an init container")
	}
	checkAcceptRA(t, spec, v)

	agent := container(t, spec, "agent")
	host, port := hostPort(t, v.Agent.HTTPAddress)
	checkProbe(t, "agent liveness", agent.LivenessProbe, "/healthz", host, port)
	checkProbe(t, "agent readiness", agent.ReadinessProbe, "/readyz", host, port)
	checkProbe(t, "agent startup", agent.StartupProbe, "/readyz", host, port)
	checkDownwardEnv(t, "agent", agent, v)

	// Capabilities: exactly what the datapath needs, or privileged.
	sc := agent.SecurityContext
	if v.Agent.Privileged {
		if sc == nil || sc.Privileged == nil || !*sc.Privileged {
			t.Errorf("agent: privileged requested, got %+v", sc)
		}
	} else {
		want := map[string][]string{"none": nil, "iptables": {"NET_ADMIN", "NET_RAW"}, "ebpf": {"NET_ADMIN", "BPF", "PERFMON"}}[v.Datapath.Type]
		extra := v.Agent.ExtraCapabilities
		if v.eniHostRouting() {
			// Rules and routes, and entering pods' namespaces to find their veths.
			extra = append(slices.Clone(extra), "NET_ADMIN", "SYS_ADMIN")
		}
		for _, c := range extra {
			if !slices.Contains(want, c) {
				want = append(want, c)
			}
		}
		var got []string
		if sc != nil && sc.Capabilities != nil {
			for _, c := range sc.Capabilities.Add {
				got = append(got, string(c))
			}
			if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("agent: must drop ALL capabilities first: %v", sc.Capabilities.Drop)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("agent capabilities %v, want %v for datapath %s", got, want, v.Datapath.Type)
		}
		if sc == nil || sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("agent: must not be privileged nor escalate: %+v", sc)
		}
	}

	// Host paths, by the container path they are mounted at.
	hostPaths := map[string]corev1.HostPathVolumeSource{}
	mounts := map[string]corev1.VolumeMount{}
	vols := map[string]corev1.Volume{}
	for _, vol := range spec.Volumes {
		vols[vol.Name] = vol
	}
	for _, m := range agent.VolumeMounts {
		mounts[m.MountPath] = m
		if hp := vols[m.Name].HostPath; hp != nil {
			hostPaths[m.MountPath] = *hp
		}
	}
	wantHost := map[string]string{
		"/host/etc/cni/net.d": v.CNI.HostConfDir, "/host/opt/cni/bin": v.CNI.HostBinDir,
		"/run/allot": "/run/allot", "/var/lib/allot": "/var/lib/allot",
	}
	if v.PluginFiles.HostPath != "" {
		wantHost["/opt/allot/plugins"] = v.PluginFiles.HostPath
	}
	if v.eniHostRouting() {
		wantHost["/var/run/netns"] = "/var/run/netns"
	}
	switch v.Datapath.Type {
	case "iptables":
		wantHost["/run/xtables.lock"] = "/run/xtables.lock"
		wantHost["/lib/modules"] = "/lib/modules"
	case "ebpf":
		wantHost["/sys/fs/bpf"] = "/sys/fs/bpf"
		wantHost["/lib/modules"] = "/lib/modules"
	}
	for in, want := range wantHost {
		if hp, ok := hostPaths[in]; !ok || hp.Path != want {
			t.Errorf("agent: %s must be the host's %s, got %+v", in, want, hp)
		}
	}
	if hp := hostPaths["/run/xtables.lock"]; v.Datapath.Type == "iptables" && (hp.Type == nil || *hp.Type != corev1.HostPathFileOrCreate) {
		t.Errorf("agent: xtables lock must be FileOrCreate: %+v", hp)
	}
	if m, ok := mounts["/lib/modules"]; ok && !m.ReadOnly {
		t.Errorf("agent: /lib/modules must be read-only")
	}
	if m, ok := mounts["/sys/fs/bpf"]; ok && (m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer) {
		t.Errorf("agent: /sys/fs/bpf needs HostToContainer propagation: %+v", m)
	}
	if m, ok := mounts["/var/run/netns"]; ok && (!m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer) {
		t.Errorf("agent: /var/run/netns must be read-only with HostToContainer propagation: %+v", m)
	}
	for in := range hostPaths {
		if _, ok := wantHost[in]; !ok {
			t.Errorf("agent: unexpected host path mounted at %s", in)
		}
	}

	// The configuration the agent is started with, and the files it names: inside mounts.
	cm := find[*corev1.ConfigMap](t, docs, "allot-agent-config")
	cfgPath := "/etc/allot/config/allotd.yaml"
	if !slices.Contains(agent.Args, cfgPath) {
		t.Errorf("agent: args %v do not name %s", agent.Args, cfgPath)
	}
	checkMountedFile(t, "agent", spec, agent, cfgPath, cm.Name, "allotd.yaml")
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["allotd.yaml"]), &cfg); err != nil {
		t.Fatalf("agent config: %v", err)
	}
	within := func(field, p string) {
		t.Helper()
		if !underMount(agent, p) {
			t.Errorf("agent config %s=%s is on no volume of the agent (lost at restart or invisible to the host)", field, p)
		}
	}
	within("socket", str(cfg, "socket"))
	within("store.path", str(cfg, "store", "path"))
	within("cni.confDir", str(cfg, "cni", "confDir"))
	within("cni.binDir", str(cfg, "cni", "binDir"))
	if str(cfg, "cni", "confDir") != "/host/etc/cni/net.d" || str(cfg, "cni", "binDir") != "/host/opt/cni/bin" {
		t.Errorf("agent config cni dirs %q %q", str(cfg, "cni", "confDir"), str(cfg, "cni", "binDir"))
	}
	if str(cfg, "mode") != "agent" || str(cfg, "datapath", "type") != v.Datapath.Type || str(cfg, "cni", "uninstall") != v.CNI.Uninstall {
		t.Errorf("agent config: mode %q datapath %q uninstall %q", str(cfg, "mode"), str(cfg, "datapath", "type"), str(cfg, "cni", "uninstall"))
	}
	if str(cfg, "http", "address") != v.Agent.HTTPAddress {
		t.Errorf("agent config http.address %q, probes use %s", str(cfg, "http", "address"), v.Agent.HTTPAddress)
	}
	// In clustercidr mode the agent's pool is its Node's spec.podCIDRs; in the others, not.
	if wantIPAM := map[bool]string{true: "kubernetes"}[v.Mode == "clustercidr"]; str(cfg, "cluster", "ipam") != wantIPAM {
		t.Errorf("agent config cluster.ipam %q in mode %s, want %q", str(cfg, "cluster", "ipam"), v.Mode, wantIPAM)
	}
	masq := str(cfg, "datapath", "masqAgentConfig")
	if (masq != "") != (v.IPMasqAgent.Enabled && v.Datapath.Type != "none") {
		t.Errorf("agent config datapath.masqAgentConfig=%q with ipMasqAgent.enabled %v and datapath %s", masq, v.IPMasqAgent.Enabled, v.Datapath.Type)
	}
	if masq != "" {
		within("datapath.masqAgentConfig", masq)
	}
	if pin := str(cfg, "datapath", "pinPath"); pin != "" && !strings.HasPrefix(pin, "/sys/fs/bpf/") {
		t.Errorf("datapath.pinPath %s is not on the mounted bpffs", pin)
	}
	if plugins, _ := cfg["plugins"].([]any); len(plugins) > 0 {
		for i, p := range plugins {
			pp, _ := p.(map[string]any)
			if k, _ := pp["kind"].(string); k == "cloud-backend" {
				t.Errorf("agent config plugins[%d] is a cloud-backend: the operator's", i)
			}
			within(fmt.Sprintf("plugins[%d].path", i), fmt.Sprint(pp["path"]))
		}
	}
	var conflist struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(str(cfg, "cni", "conflist")), &conflist); err != nil {
		t.Fatalf("cni.conflist is not JSON: %v", err)
	}
	if conflist.CNIVersion == "" || conflist.Name == "" || len(conflist.Plugins) == 0 {
		t.Errorf("cni.conflist lacks cniVersion, name or plugins: %+v", conflist)
	}
	usesAllot := false
	for _, p := range conflist.Plugins {
		typ, _ := p["type"].(string)
		if typ != "allot-cni" && !slices.Contains(v.CNI.InstallPlugins, typ) {
			t.Errorf("cni.conflist uses plugin %q, which install-cni does not install (%v)", typ, v.CNI.InstallPlugins)
		}
		if ipam, _ := p["ipam"].(map[string]any); ipam != nil && ipam["type"] == "allot-cni" {
			usesAllot = true
		}
	}
	if !usesAllot {
		t.Errorf("cni.conflist has no plugin with ipam allot-cni")
	}
	// ENI mode: ptp, as the AWS VPC CNI plumbs pods (a veth and a host route per pod); a
	// bridge would hold the ENI subnet's router address with the subnet's prefix.
	if v.Mode == "eni" && len(conflist.Plugins) > 0 && conflist.Plugins[0]["type"] != "ptp" {
		t.Errorf("ENI mode: the conflist's interface plugin is %v, want ptp", conflist.Plugins[0]["type"])
	}
	// ENI mode: host routing gives the secondary ENIs eni.mtu, and the default conflist's
	// ptp gives it to the pods' veths (not ptp's 1500).
	if got := str(cfg, "cluster", "eni", "mtu"); v.Mode == "eni" && got != strconv.Itoa(v.ENI.MTU) {
		t.Errorf("agent config cluster.eni.mtu %q, want eni.mtu %d", got, v.ENI.MTU)
	}
	if v.Mode == "eni" && isEmpty(v.CNI.Conflist) && len(conflist.Plugins) > 0 {
		if mtu, _ := conflist.Plugins[0]["mtu"].(float64); int(mtu) != v.ENI.MTU || v.ENI.MTU == 0 {
			t.Errorf("ENI mode: ptp's mtu is %v, want eni.mtu %d", conflist.Plugins[0]["mtu"], v.ENI.MTU)
		}
	}
	if nets := strs(cfg, "cluster", "sharedPools", "networks"); v.Mode == "sharedpool" && !slices.Contains(nets, conflist.Name) && len(v.SharedPools.Networks) == 0 {
		t.Errorf("sharedpool mode: the conflist's network %q is not served from shared pools (%v)", conflist.Name, nets)
	}
	if ipm, ok := lookup[*corev1.ConfigMap](docs, "allot-ip-masq-agent"); ok {
		if _, err := masqconfig.Parse([]byte(ipm.Data["config"])); err != nil {
			t.Errorf("ip-masq-agent ConfigMap: %v", err)
		}
	} else if len(v.IPMasqAgent.Config) > 0 && v.Datapath.Type != "none" {
		t.Errorf("ipMasqAgent.config is set but no ConfigMap allot-ip-masq-agent is rendered")
	}
}

func checkOperator(t *testing.T, docs []doc, v values) {
	t.Helper()
	dep, ok := lookup[*appsv1.Deployment](docs, "allot-operator")
	if ok != v.Operator.Enabled {
		t.Fatalf("operator Deployment rendered %v, want %v", ok, v.Operator.Enabled)
	}
	if !ok {
		return
	}
	spec := dep.Spec.Template.Spec
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != v.Operator.Replicas {
		t.Errorf("operator replicas %v, want %d", dep.Spec.Replicas, v.Operator.Replicas)
	}
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet || spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("operator: hostNetwork %v dnsPolicy %s priorityClassName %s", spec.HostNetwork, spec.DNSPolicy, spec.PriorityClassName)
	}
	for _, key := range []string{"node.kubernetes.io/not-ready", "node.cloudprovider.kubernetes.io/uninitialized"} {
		if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
			return tl.Key == key && tl.Operator == corev1.TolerationOpExists && tl.Effect == ""
		}) {
			t.Errorf("operator: no toleration of %s", key)
		}
	}
	aa := spec.Affinity.PodAntiAffinity
	switch v.Operator.PodAntiAffinity {
	case "required":
		if aa == nil || len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || aa.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "kubernetes.io/hostname" {
			t.Errorf("operator: required anti-affinity by hostname expected: %+v", aa)
		} else {
			checkSelector(t, "operator anti-affinity", aa.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector, dep.Spec.Template.Labels)
		}
	case "soft":
		if aa == nil || len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 0 || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Errorf("operator: preferred anti-affinity expected: %+v", aa)
		}
	}
	op := container(t, spec, "operator")
	host, port := hostPort(t, v.Operator.HTTPAddress)
	checkProbe(t, "operator liveness", op.LivenessProbe, "/healthz", host, port)
	checkProbe(t, "operator readiness", op.ReadinessProbe, "/readyz", host, port)
	checkDownwardEnv(t, "operator", op, v)
	if v.agentEnabled() {
		if _, aport := hostPort(t, v.Agent.HTTPAddress); aport == port {
			t.Errorf("operator and agent share port %d on hostNetwork", port)
		}
	}
	if sc := op.SecurityContext; sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || spec.SecurityContext == nil ||
		spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Errorf("operator: must run as non-root without capabilities")
	}
	pdb, ok := lookup[*policyv1.PodDisruptionBudget](docs, "allot-operator")
	if ok != (v.Operator.Replicas > 1) {
		t.Errorf("operator PDB rendered %v with %d replicas", ok, v.Operator.Replicas)
	} else if ok {
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
			t.Errorf("operator PDB maxUnavailable %v", pdb.Spec.MaxUnavailable)
		}
		checkSelector(t, "operator PDB", pdb.Spec.Selector, dep.Spec.Template.Labels)
	}
	cm := find[*corev1.ConfigMap](t, docs, "allot-operator-config")
	checkMountedFile(t, "operator", spec, op, "/etc/allot/config/allotd.yaml", cm.Name, "allotd.yaml")
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["allotd.yaml"]), &cfg); err != nil {
		t.Fatalf("operator config: %v", err)
	}
	if str(cfg, "mode") != "operator" || str(cfg, "cluster", "leaderElection", "namespace") != Namespace ||
		str(cfg, "cluster", "leaderElection", "name") != "allot-operator" || str(cfg, "http", "address") != v.Operator.HTTPAddress {
		t.Errorf("operator config: %v", cfg)
	}
	// The Lease the Role lets it write is the one its configuration names.
	role := find[*rbacv1.Role](t, docs, "allot-operator")
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "leases") && slices.Contains(r.ResourceNames, "allot-operator") && slices.Contains(r.Verbs, "update")
	}) {
		t.Errorf("operator Role does not allow updating the Lease allot-operator: %+v", role.Rules)
	}
	if plugins, _ := cfg["plugins"].([]any); len(plugins) > 0 {
		for i, p := range plugins {
			pp, _ := p.(map[string]any)
			if pp["kind"] != "cloud-backend" {
				t.Errorf("operator config plugins[%d] is a %v: the agent's", i, pp["kind"])
			}
			if !underMount(op, fmt.Sprint(pp["path"])) {
				t.Errorf("operator config plugins[%d].path %v is on no volume", i, pp["path"])
			}
		}
	}
	sa := find[*corev1.ServiceAccount](t, docs, "allot-operator")
	if v.ENI.IAMRoleArn != "" && sa.Annotations["eks.amazonaws.com/role-arn"] != v.ENI.IAMRoleArn {
		t.Errorf("operator ServiceAccount: IRSA annotation %q, want %q", sa.Annotations["eks.amazonaws.com/role-arn"], v.ENI.IAMRoleArn)
	}
}

// checkClusterPodCIDRs: clusterPodCIDRs reaches the operator (the ClusterCIDRConfig rule) and
// the agents (never masqueraded) as cluster.podCIDRs.
func checkClusterPodCIDRs(t *testing.T, docs []doc, v values) {
	t.Helper()
	want := fmt.Sprint(v.ClusterPodCIDRs)
	for _, c := range []struct {
		name string
		on   bool
	}{{"allot-operator-config", v.Operator.Enabled}, {"allot-agent-config", v.agentEnabled()}} {
		if !c.on {
			continue
		}
		var cfg map[string]any
		if err := yaml.Unmarshal([]byte(find[*corev1.ConfigMap](t, docs, c.name).Data["allotd.yaml"]), &cfg); err != nil {
			t.Fatal(err)
		}
		var got []string
		if cl, ok := cfg["cluster"].(map[string]any); ok {
			if l, ok := cl["podCIDRs"].([]any); ok {
				for _, e := range l {
					got = append(got, fmt.Sprint(e))
				}
			}
		}
		if fmt.Sprint(got) != want {
			t.Errorf("%s: cluster.podCIDRs %v; want clusterPodCIDRs %s", c.name, got, want)
		}
	}
}

func checkWebhook(t *testing.T, docs []doc, v values) {
	t.Helper()
	vwc, ok := lookup[*admissionregistrationv1.ValidatingWebhookConfiguration](docs, "allot-shared-pools.allot.io")
	if ok != v.Webhook.Enabled {
		t.Fatalf("webhook configuration rendered %v, want %v", ok, v.Webhook.Enabled)
	}
	if !ok {
		return
	}
	svc := find[*corev1.Service](t, docs, "allot-operator-webhook")
	dep := find[*appsv1.Deployment](t, docs, "allot-operator")
	checkSelector(t, "webhook Service", &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, dep.Spec.Template.Labels)
	op := container(t, dep.Spec.Template.Spec, "operator")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != int(v.Webhook.Port) ||
		!slices.ContainsFunc(op.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == v.Webhook.Port }) {
		t.Errorf("webhook Service ports %+v do not reach the operator's webhook port %d", svc.Spec.Ports, v.Webhook.Port)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(find[*corev1.ConfigMap](t, docs, "allot-operator-config").Data["allotd.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	w := func(k ...string) string {
		return str(cfg, append([]string{"cluster", "sharedPools", "webhook"}, k...)...)
	}
	if w("enabled") != "true" || w("register") != "false" || w("address") != fmt.Sprintf(":%d", v.Webhook.Port) ||
		w("configName") != vwc.Name || w("service", "name") != svc.Name || w("service", "namespace") != Namespace {
		t.Errorf("operator config cluster.sharedPools.webhook does not match the chart's objects: %v", cfg["cluster"])
	}
	if !underMount(op, w("certDir")+"/tls.crt") {
		t.Errorf("webhook certDir %s is not mounted", w("certDir"))
	}
	// IPPools are sent to the webhook only where multi-pool is off (refused there, naming the
	// mode), as the operator registers them (core/operator/webhook.go).
	want := []string{"sharedippools.allot.io", "reservedips.allot.io", "allotsubnets.allot.io"}
	if v.Mode == "clustercidr" {
		want = append(want, "clustercidrconfigs.allot.io")
	}
	if v.Mode == "clustercidr" || v.Mode == "eni" {
		want = append(want, "ippools.allot.io")
	}
	var got []string
	for _, wh := range vwc.Webhooks {
		got = append(got, wh.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("webhooks %v, want %v", got, want)
	}
	for _, wh := range vwc.Webhooks {
		s := wh.ClientConfig.Service
		if s == nil || s.Name != svc.Name || s.Namespace != Namespace || s.Path == nil || *s.Path != "/validate" || s.Port == nil || *s.Port != svc.Spec.Ports[0].Port {
			t.Errorf("webhook %s: clientConfig %+v does not reach the Service", wh.Name, s)
		}
		if len(wh.MatchConditions) == 0 {
			t.Errorf("webhook %s: metadata-only updates must not reach it (matchConditions)", wh.Name)
		}
		if v.Webhook.CertManager.Enabled {
			if len(wh.ClientConfig.CABundle) != 0 || vwc.Annotations["cert-manager.io/inject-ca-from"] != Namespace+"/allot-operator-webhook" {
				t.Errorf("webhook %s: with cert-manager the CA is injected: %q", wh.Name, vwc.Annotations)
			}
			continue
		}
		// The generated serving certificate must verify against the caBundle for the
		// Service's name, as the API server checks it.
		sec := find[*corev1.Secret](t, docs, "allot-operator-webhook-tls")
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(wh.ClientConfig.CABundle) {
			t.Fatalf("webhook %s: caBundle is not PEM", wh.Name)
		}
		blk, _ := pem.Decode(sec.Data["tls.crt"])
		if blk == nil {
			t.Fatal("tls.crt is not PEM")
		}
		crt, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := crt.Verify(x509.VerifyOptions{Roots: pool, DNSName: svc.Name + "." + Namespace + ".svc"}); err != nil {
			t.Errorf("webhook certificate does not verify for the Service: %v", err)
		}
		if !bytes.Equal(sec.Data["ca.crt"], wh.ClientConfig.CABundle) || len(sec.Data["tls.key"]) == 0 {
			t.Errorf("Secret's ca.crt differs from the caBundle, or no key")
		}
	}
}

func checkPools(t *testing.T, docs []doc, v values) {
	t.Helper()
	var ippools, shared []string
	for _, d := range docs {
		switch o := d.obj.(type) {
		case *allotv1.IPPool:
			ippools = append(ippools, d.name)
			if v.KeepPools && o.Annotations["helm.sh/resource-policy"] != "keep" {
				t.Errorf("IPPool %s: not kept on uninstall", d.name)
			}
		case *allotv1.SharedIPPool:
			shared = append(shared, d.name)
		case *allotv1.ClusterCIDRConfig:
			if v.Mode != "clustercidr" {
				t.Errorf("ClusterCIDRConfig %s rendered in mode %s", d.name, v.Mode)
			}
		}
	}
	var want []string
	if v.Mode == "multipool" || v.Mode == "sharedpool" {
		for _, p := range v.Pools {
			want = append(want, p.Name)
		}
	}
	if !slices.Equal(ippools, want) {
		t.Errorf("IPPools %v, want %v", ippools, want)
	}
	want = want[:0]
	for _, p := range v.SharedPools.Pools {
		want = append(want, p.Name)
	}
	if !slices.Equal(shared, want) {
		t.Errorf("SharedIPPools %v, want %v", shared, want)
	}
}

// checkMountedFile: file is the key of the ConfigMap cm mounted in c.
func checkMountedFile(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container, file, cm, key string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if path.Join(m.MountPath, key) != file {
			continue
		}
		for _, vol := range spec.Volumes {
			if vol.Name == m.Name && vol.ConfigMap != nil && vol.ConfigMap.Name == cm {
				return
			}
		}
	}
	t.Errorf("%s: %s is not the key %s of ConfigMap %s", what, file, key, cm)
}

func underMount(c corev1.Container, p string) bool {
	for _, m := range c.VolumeMounts {
		if p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return true
		}
	}
	return false
}

// str reads a nested scalar of a decoded YAML map as a string ("" when absent).
func str(m map[string]any, keys ...string) string {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = mm[k]
	}
	switch x := cur.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	default:
		return fmt.Sprint(x)
	}
}

func strs(m map[string]any, keys ...string) []string {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	l, _ := cur.([]any)
	var out []string
	for _, x := range l {
		out = append(out, fmt.Sprint(x))
	}
	return out
}
