package chart

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/plugins/cloud/awseni"
)

// TestChartENISchemaMatchesConfig: values.schema.json's eni.config is cluster.eni as the
// agent reads it (core/config.ClusterENI, by its koanf keys, nested node configs included):
// a key the agent takes but the schema lacks makes `helm install` refuse a documented
// setting (additionalProperties is false), and a key the schema takes but the agent lacks
// makes the agent refuse to start. Types must agree too: durations are strings the agent
// parses, tag maps string maps.
func TestChartENISchemaMatchesConfig(t *testing.T) {
	s := eniSchema(t, "config")
	for _, msg := range schemaDrift("koanf", "eni.config", reflect.TypeFor[config.ClusterENI](), s) {
		t.Error(msg)
	}
}

// TestChartENIAWSSchemaMatchesConfig: values.schema.json's eni.aws is the aws-eni backend's
// block as the operator decodes it (plugins/cloud/awseni.Config, by its json keys, unknown
// keys refused): the same two ways to fail as eni.config.
func TestChartENIAWSSchemaMatchesConfig(t *testing.T) {
	s := eniSchema(t, "aws")
	for _, msg := range schemaDrift("json", "eni.aws", reflect.TypeFor[awseni.Config](), s) {
		t.Error(msg)
	}
}

// eniSchema returns the schema of eni.<key> in values.schema.json.
func eniSchema(t *testing.T, key string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(t), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"eni", key} {
		s, _ = s["properties"].(map[string]any)[k].(map[string]any)
		if s == nil {
			t.Fatalf("values.schema.json has no properties.eni.properties.%s", key)
		}
	}
	return s
}

var durationType = reflect.TypeFor[time.Duration]()

// isDuration: time.Duration, or a struct wrapping one that decodes a duration string
// (awseni.Duration).
func isDuration(typ reflect.Type) bool {
	return typ == durationType || typ.Kind() == reflect.Struct && typ.NumField() == 1 &&
		typ.Field(0).Anonymous && typ.Field(0).Type == durationType
}

// schemaDrift compares the JSON schema s of the value at path with the Go type the agent
// decodes it into (by the struct tag named tag: koanf for allotd's file, json for a
// plugin's block), and returns what disagrees.
func schemaDrift(tag, path string, typ reflect.Type, s map[string]any) []string {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := map[reflect.Kind]string{
		reflect.Struct: "object", reflect.Map: "object", reflect.Slice: "array",
		reflect.String: "string", reflect.Bool: "boolean", reflect.Float64: "number",
		reflect.Int: "integer", reflect.Int32: "integer", reflect.Int64: "integer",
		reflect.Uint: "integer", reflect.Uint16: "integer", reflect.Uint32: "integer",
	}[typ.Kind()]
	if isDuration(typ) {
		want = "string"
	}
	if got, _ := s["type"].(string); got != want {
		return []string{path + ": schema type " + strings.TrimSpace(got+" ") + "(want " + want + " for Go " + typ.String() + ")"}
	}
	switch {
	case isDuration(typ):
		return durationDrift(path, s)
	case typ.Kind() == reflect.Struct:
		return structDrift(tag, path, typ, s)
	case typ.Kind() == reflect.Map:
		if typ.Key().Kind() != reflect.String {
			return []string{path + ": Go " + typ.String() + " has no JSON object form"}
		}
		items, ok := s["additionalProperties"].(map[string]any)
		if !ok {
			return []string{path + ": schema of a map has no additionalProperties schema for its values"}
		}
		return schemaDrift(tag, path+".*", typ.Elem(), items)
	case typ.Kind() == reflect.Slice:
		items, ok := s["items"].(map[string]any)
		if !ok {
			return []string{path + ": schema of a list has no items schema"}
		}
		return schemaDrift(tag, path+"[]", typ.Elem(), items)
	}
	return nil
}

// durationDrift: a duration is a string the agent parses (time.ParseDuration); the schema's
// pattern must take the agent's usual forms and refuse a bare number (nanoseconds to the agent).
func durationDrift(path string, s map[string]any) []string {
	p, _ := s["pattern"].(string)
	re, err := regexp.Compile(p)
	if p == "" || err != nil {
		return []string{path + ": a duration needs a pattern (" + p + ")"}
	}
	var out []string
	for _, d := range []string{"30s", "5m", "1h30m", "250ms", "1.5s"} {
		if _, err := time.ParseDuration(d); err != nil || !re.MatchString(d) {
			out = append(out, path+": pattern "+p+" refuses "+d)
		}
	}
	if re.MatchString("30") {
		out = append(out, path+": pattern "+p+" takes 30, which the agent would read as nanoseconds")
	}
	return out
}

// structDrift: every key of typ (by its tag) is a schema property, every property a key,
// and nothing else is allowed.
func structDrift(tag, path string, typ reflect.Type, s map[string]any) []string {
	var out []string
	if s["additionalProperties"] != false {
		out = append(out, path+": additionalProperties must be false, or a misspelt key reaches the agent")
	}
	props, _ := s["properties"].(map[string]any)
	seen := map[string]bool{}
	for f := range typ.Fields() {
		key, _, _ := strings.Cut(f.Tag.Get(tag), ",")
		if !f.IsExported() || key == "-" {
			continue
		}
		if key == "" {
			out = append(out, path+": Go field "+typ.Name()+"."+f.Name+" has no "+tag+" tag")
			continue
		}
		seen[key] = true
		ps, ok := props[key].(map[string]any)
		if !ok {
			out = append(out, path+"."+key+": the agent takes it (Go "+typ.Name()+"."+f.Name+") but values.schema.json has no property for it")
			continue
		}
		out = append(out, schemaDrift(tag, path+"."+key, f.Type, ps)...)
	}
	for _, k := range slices.Sorted(maps.Keys(props)) {
		if !seen[k] {
			out = append(out, path+"."+k+": values.schema.json takes it but the agent's "+typ.Name()+" has no such key")
		}
	}
	return out
}

// eniEveryKey sets every key of eni.config (the AWS VPC CNI's and Cilium's ENI settings as
// the awseni README documents them), and eni.mtu in place of eni.config.mtu.
const eniEveryKey = `eni:
  mtu: 1500
  config:
    backend: aws-eni
    preAllocate: 16
    minAllocate: 16
    maxAllocate: 64
    maxAboveWatermark: 2
    firstInterfaceIndex: 1
    subnetIDs: [subnet-0a1b2c3d4e5f60718]
    subnetTags: {kubernetes.io/role/pods: "1"}
    securityGroups: [sg-0a1b2c3d4e5f60718]
    excludeInterfaceTags: {allot.io/no-pods: "true"}
    clusterName: prod-eu
    gcInterval: 10m
    gcTags: {team: network}
    nodeConfigs:
      eu-west-1a:
        subnetIDs: [subnet-01a]
        subnetTags: {zone: a}
        securityGroups: [sg-01a]
        securityGroupTags: {tier: pods}
    nodeConfigLabel: topology.kubernetes.io/zone
    description: "allot pods of %s"
    tags: {owner: platform}
    deleteOnTermination: true
    prefixDelegation: true
    ipv6PrefixDelegation: true
    release: true
    releaseDelay: 3m
    minPassInterval: 1s
    resyncInterval: 1m30s
    workers: 8
    maxStepsPerNode: 16
    pool: default
    hostRoutes: false
    hostRouting: true
    netnsDirs: [/var/run/netns, /run/netns]
    node:
      instanceID: i-0123456789abcdef0
      instanceType: m5.large
      zone: eu-west-1a
      preAllocate: 8
      minAllocate: 0
      maxAllocate: 32
      maxAboveWatermark: 1
      firstInterfaceIndex: 1
      subnetIDs: [subnet-0b1b2c3d4e5f60718]
      subnetTags: {tier: pods}
      securityGroups: [sg-0b1b2c3d4e5f60718]
      securityGroupTags: {tier: pods}
      prefixDelegation: false
      ipv6PrefixDelegation: true
`

// TestChartENIEveryKeyCase: the eni-every-key case (rendered by TestChartTemplate, loaded by
// allotd's loader in TestRenderedConfigsLoad) gives the agent every key of cluster.eni, so
// a key added to the agent is tried through the chart too.
func TestChartENIEveryKeyCase(t *testing.T) {
	docs := decodeStrict(t, template(t, valuesCase{file: "aws-eni.yaml", values: eniEveryKey}))
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(find[*corev1.ConfigMap](t, docs, "allot-agent-config").Data["allotd.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	eni, _ := cfg["cluster"].(map[string]any)["eni"].(map[string]any)
	for _, msg := range missingKeys("cluster.eni", reflect.TypeFor[config.ClusterENI](), eni) {
		t.Error(msg)
	}
	if eni["mtu"] != float64(1500) {
		t.Errorf("agent config cluster.eni.mtu %v, want eni.mtu 1500", eni["mtu"])
	}
}

// missingKeys lists the koanf keys of typ (a struct, or a map of structs) that m lacks.
func missingKeys(path string, typ reflect.Type, m map[string]any) []string {
	if typ.Kind() == reflect.Map {
		if len(m) == 0 {
			return []string{path + ": no entry"}
		}
		var out []string
		for k, v := range m {
			sub, _ := v.(map[string]any)
			out = append(out, missingKeys(path+"."+k, typ.Elem(), sub)...)
		}
		return out
	}
	var out []string
	for f := range typ.Fields() {
		key, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
		if key == "" || key == "-" {
			continue
		}
		v, ok := m[key]
		if !ok {
			out = append(out, path+"."+key+": not set by the eni-every-key case")
			continue
		}
		if sub, isMap := v.(map[string]any); isMap && (f.Type.Kind() == reflect.Struct || f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct) {
			out = append(out, missingKeys(path+"."+key, f.Type, sub)...)
		}
	}
	return out
}

// TestChartENIConfigMTURefused: eni.config.mtu is refused, naming eni.mtu, rather than merged:
// the agent's cluster.eni.mtu (the ENIs' links) and ptp's mtu (the pods') must be one value.
func TestChartENIConfigMTURefused(t *testing.T) {
	c := valuesCase{file: "aws-eni.yaml", set: []string{"eni.config.mtu=1500"}}
	args := append([]string{"template", ReleaseName, chartDir(t), "--namespace", Namespace}, c.args(t)...)
	for _, extra := range [][]string{nil, {"--skip-schema-validation"}} {
		_, err := tryHelm(t, nil, append(args, extra...)...)
		if want := "eni.config.mtu: set eni.mtu instead"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("eni.config.mtu=1500 %v: %v, want %q", extra, err, want)
		}
	}
}

// TestChartENIAWSSchemaBounds: values.schema.json refuses what the aws-eni backend refuses
// (awseni.ParseConfig over its defaults) and takes what it takes, so a bad eni.aws fails
// at helm install naming the key rather than in the operator's log.
func TestChartENIAWSSchemaBounds(t *testing.T) {
	for _, c := range []struct {
		aws string
		key string // named by the refusal; "": accepted
	}{
		{aws: `{qps: 0, burst: 0}`},
		{aws: `{qps: 2.5, burst: 1, max-attempts: 1, max-backoff: 0s, resync-interval: 30s}`},
		{aws: `{burst: 0}`, key: "burst"},
		{aws: `{qps: 10, burst: 0}`, key: "burst"},
		{aws: `{max-attempts: 0}`, key: "max-attempts"},
		{aws: `{max-backoff: -1s}`, key: "max-backoff"},
		{aws: `{resync-interval: 0s}`, key: "resync-interval"},
		{aws: `{resync-interval: "0.0m"}`, key: "resync-interval"},
		{aws: `{instance-limit-mapping: {m5.large: "3, 10, 10", t3.nano: "1,2,0"}}`},
		{aws: `{instance-limit-mapping: {m5.large: "0,10,10"}}`, key: "instance-limit-mapping"},
		{aws: `{instance-limit-mapping: {m5.large: "3,1,0"}}`, key: "instance-limit-mapping"},
		{aws: `{instance-limit-mapping: {m5.large: "3,10"}}`, key: "instance-limit-mapping"},
	} {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(c.aws), &m); err != nil {
			t.Fatal(err)
		}
		if _, err := awseni.ParseConfig(m); (err == nil) != (c.key == "") {
			t.Errorf("%s: the backend says %v, want refused %v", c.aws, err, c.key != "")
		}
		vc := valuesCase{file: "aws-eni.yaml", values: "eni:\n  aws: " + c.aws + "\n"}
		args := append([]string{"template", ReleaseName, chartDir(t), "--namespace", Namespace}, vc.args(t)...)
		_, err := tryHelm(t, nil, args...)
		if c.key == "" && err != nil || c.key != "" && (err == nil || !strings.Contains(err.Error(), c.key)) {
			t.Errorf("%s: helm template: %v, want refused naming %q", c.aws, err, c.key)
		}
	}
}
