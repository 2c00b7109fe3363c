package archtest

// Root is the import path prefix of the repository's modules; rule paths are relative to it.
const Root = "github.com/allot-ipam/allot/"

// RepoRules are the dependency rules of the root module (ARCHITECTURE.md, "Dependency
// rules"). Composition lives in cmd/: core gets the built-in plugins as a
// core/registry.Registry that plugins/builtin fills and only mains and tests import.
var RepoRules = []Rule{
	{
		Name: "core depends on no plugin and no main",
		From: "core/",
		Deny: []string{"plugins/", "cmd/"},
	},
	{
		Name:   "plugins import the sdk, other plugins, internal/ and bpf, not core",
		From:   "plugins/",
		Direct: true,
		Deny:   []string{"core/", "cmd/", "test/"},
		Allow: []string{
			// The composition: the registry type core reads the built-ins from.
			"plugins/builtin=>core/registry",
			// aws-eni implements core/eni's optional InterfaceCollector (detached-interface
			// GC); an interface that belongs in sdk/cloud once that contract takes it.
			"plugins/cloud/awseni=>core/eni",
		},
	},
	{
		Name: "internal/ and bpf are leaves: no core, plugin or main",
		From: "internal/",
		Deny: []string{"core/", "plugins/", "cmd/"},
	},
	{
		Name: "internal/ and bpf are leaves: no core, plugin or main",
		From: "bpf",
		Deny: []string{"core/", "plugins/", "cmd/", "internal/"},
	},
}

// SDKRules are the rules of the sdk module: plugin authors depend on it alone, so it
// imports nothing of the root module.
var SDKRules = []Rule{
	{
		Name: "sdk imports nothing of the root module",
		From: "sdk/",
		Deny: []string{"core/", "plugins/", "cmd/", "internal/", "test/", "bpf"},
	},
}
