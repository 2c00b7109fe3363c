package config

import (
	"strings"
	"testing"
)

const chartConflist = `{"cniVersion":"1.1.0","name":"allot","plugins":[{"type":"bridge","bridge":"allot0","isGateway":true,"ipam":{"type":"allot-cni"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`

func TestCNISectionAsTheChartWritesIt(t *testing.T) {
	t.Setenv("POD_NAME", "allot-agent-x7k2p")
	t.Setenv("POD_NAMESPACE", "kube-system")
	p := writeFile(t, `mode: agent
cluster: {nodeName: node-a}
cni:
  confDir: /host/etc/cni/net.d
  confName: 05-allot.conflist
  conflist: '`+chartConflist+`'
  binDir: /host/opt/cni/bin
  uninstall: auto
`)
	c, err := load(p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := c.CNI
	if !n.Enabled() || n.ConfDir != "/host/etc/cni/net.d" || n.Conflist != chartConflist || n.BinDir != "/host/opt/cni/bin" {
		t.Fatalf("cni %+v", n)
	}
	if n.SrcDir != "/opt/allot/cni/bin" || n.PodName != "allot-agent-x7k2p" || n.PodNamespace != "kube-system" {
		t.Fatalf("defaults and downward API: %+v", n)
	}
}

func TestCNIDefaults(t *testing.T) {
	t.Setenv("POD_NAME", "")
	t.Setenv("POD_NAMESPACE", "")
	old := serviceAccountNamespace
	serviceAccountNamespace = writeFile(t, "allot-system\n")
	t.Cleanup(func() { serviceAccountNamespace = old })
	c, err := load(writeFile(t, "mode: agent\ncluster: {nodeName: n}\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.CNI.Enabled() || c.CNI.ConfName != "05-allot.conflist" || c.CNI.Uninstall != UninstallAuto {
		t.Fatalf("cni %+v", c.CNI)
	}
	if c.CNI.PodName != "" || c.CNI.PodNamespace != "allot-system" {
		t.Fatalf("pod %q/%q; the namespace falls back to the service account's", c.CNI.PodNamespace, c.CNI.PodName)
	}
}

func TestCNIValidationNamesTheField(t *testing.T) {
	cases := []struct {
		name, body, want string
	}{
		{"conflist missing", `{confDir: /etc/cni/net.d}`, "cni.conflist: required when cni.confDir is set"},
		{"relative confDir", `{confDir: etc/cni, conflist: '` + chartConflist + `'}`, `cni.confDir: "etc/cni" must be an absolute path`},
		{"relative binDir", `{binDir: bin}`, `cni.binDir: "bin" must be an absolute path`},
		{"conf extension", `{confName: 05-allot.conf}`, `cni.confName: "05-allot.conf" must end in .conflist`},
		{"conf name with directory", `{confName: ../x.conflist}`, `cni.confName: "../x.conflist" must be a plain file name`},
		{"uninstall", `{uninstall: sometimes}`, `cni.uninstall: "sometimes" is not auto, always or never`},
		{"not JSON", `{conflist: 'cniVersion: 1.1.0'}`, "cni.conflist: not a JSON object"},
		{"no name", `{conflist: '{"cniVersion":"1.1.0","plugins":[{"type":"bridge","ipam":{"type":"allot-cni"}}]}'}`, "cni.conflist: error parsing configuration list: no name"},
		{"no cniVersion", `{conflist: '{"name":"a","plugins":[{"type":"bridge","ipam":{"type":"allot-cni"}}]}'}`, "cni.conflist: cniVersion: must be set"},
		{"bad cniVersion", `{conflist: '{"cniVersion":"one","name":"a","plugins":[{"type":"bridge","ipam":{"type":"allot-cni"}}]}'}`, "cni.conflist: cniVersion:"},
		{"no plugins", `{conflist: '{"cniVersion":"1.1.0","name":"a"}'}`, "cni.conflist: plugins: must list at least one plugin"},
		{"empty plugins", `{conflist: '{"cniVersion":"1.1.0","name":"a","plugins":[]}'}`, "cni.conflist: error parsing configuration list: no plugins in list"},
		{"plugin without type", `{conflist: '{"cniVersion":"1.1.0","name":"a","plugins":[{"ipam":{"type":"allot-cni"}}]}'}`, "cni.conflist: failed to parse plugin config 0: error parsing configuration: missing 'type'"},
		{"allot-cni as main plugin", `{conflist: '{"cniVersion":"1.1.0","name":"a","plugins":[{"type":"allot-cni"}]}'}`, "cni.conflist: plugins[0].type: allot-cni is an IPAM plugin"},
		{"other ipam", `{conflist: '{"cniVersion":"1.1.0","name":"a","plugins":[{"type":"bridge","ipam":{"type":"host-local"}}]}'}`, "cni.conflist: plugins: no plugin has allot-cni as its ipam"},
		{"pod name", `{podName: Not_A_Pod}`, `cni.podName: "Not_A_Pod" is not a valid Pod name`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(writeFile(t, "mode: agent\ncluster: {nodeName: n}\ncni: "+tc.body+"\n"), nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCNIOnlyInAgentMode(t *testing.T) {
	_, err := load(writeFile(t, minimal+"cni: {confDir: /etc/cni/net.d, conflist: '"+chartConflist+"'}\n"), nil, nil)
	if err == nil || !strings.Contains(err.Error(), `cni.confDir: only used in agent mode (mode is "standalone")`) || !strings.Contains(err.Error(), "cni.conflist: only used in agent mode") {
		t.Fatalf("standalone with a cni section: %v", err)
	}
}

// TestValidateConflistAcceptsTheShippedShapes: the README walk-through's list and a list
// with allot-cni behind a second plugin.
func TestValidateConflistAcceptsTheShippedShapes(t *testing.T) {
	for _, s := range []string{
		chartConflist,
		`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge","bridge":"cbr0","isGateway":true,"ipam":{"type":"allot-cni"}}]}`,
		`{"cniVersion":"0.4.0","name":"multi","plugins":[{"type":"tuning"},{"type":"ptp","ipam":{"type":"allot-cni","pools":["a"]}}]}`,
	} {
		if err := ValidateConflist([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

// TestENIConflistMTU: in ENI mode an interface plugin's mtu (the chart's eni.mtu, written
// into ptp's configuration) is checked as the AWS VPC CNI checks AWS_VPC_ENI_MTU, naming the
// plugin's field; outside ENI mode it is the plugin's business.
func TestENIConflistMTU(t *testing.T) {
	ptp := func(mtu string) string {
		return `{"cniVersion":"1.0.0","name":"allot","plugins":[{"type":"ptp","ipMasq":false,"mtu":` + mtu + `,"ipam":{"type":"allot-cni"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	}
	for _, tc := range []struct {
		name, eni, mtu, want string
	}{
		{"jumbo", "{backend: aws-eni}", "9001", ""},
		{"ethernet", "{backend: aws-eni}", "1500", ""},
		{"IPv4 minimum", "{backend: aws-eni}", "576", ""},
		{"below IPv4", "{backend: aws-eni}", "575", "cni.conflist: plugins[0].mtu: 575 is outside 576..9001"},
		{"above an ENI's", "{backend: aws-eni}", "9216", "cni.conflist: plugins[0].mtu: 9216 is outside 576..9001"},
		{"not an integer", "{backend: aws-eni}", `"9001"`, `cni.conflist: plugins[0].mtu: "9001" is not an integer`},
		{"below IPv6", "{backend: aws-eni, ipv6PrefixDelegation: true}", "1000", "cni.conflist: plugins[0].mtu: 1000 is below 1280, the minimum MTU of an IPv6 link"},
		{"IPv6 of the node", "{backend: aws-eni, node: {ipv6PrefixDelegation: true}}", "1279", "cni.conflist: plugins[0].mtu: 1279 is below 1280"},
		{"IPv6 minimum", "{backend: aws-eni, ipv6PrefixDelegation: true}", "1280", ""},
		{"not ENI mode", "{}", "65000", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(writeFile(t, "mode: agent\ncluster: {nodeName: n, eni: "+tc.eni+"}\ncni: {confDir: /etc/cni/net.d, conflist: '"+ptp(tc.mtu)+"'}\n"), nil, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("mtu %s refused: %v", tc.mtu, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("mtu %s: got %v, want an error containing %q", tc.mtu, err, tc.want)
			}
		})
	}
}

// TestENILinkMTU: cluster.eni.mtu (the MTU host routing gives the secondary ENIs) is checked
// as the conflist's, naming the field.
func TestENILinkMTU(t *testing.T) {
	for _, tc := range []struct{ eni, want string }{
		{"{backend: aws-eni, mtu: 9001}", ""},
		{"{backend: aws-eni}", ""}, // 0: the links stay as the OS set them
		{"{backend: aws-eni, mtu: 500}", "cluster.eni.mtu: 500 is outside 576..9001"},
		{"{backend: aws-eni, mtu: 9500}", "cluster.eni.mtu: 9500 is outside 576..9001"},
		{"{backend: aws-eni, mtu: 1200, ipv6PrefixDelegation: true}", "cluster.eni.mtu: 1200 is below 1280"},
	} {
		_, err := load(writeFile(t, "mode: agent\ncluster: {nodeName: n, eni: "+tc.eni+"}\n"), nil, nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s refused: %v", tc.eni, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error containing %q", tc.eni, err, tc.want)
		}
	}
}
