// Package operator breaks "core depends on no plugin" directly.
package operator

import "example.com/violating/plugins/policy"

// Run uses a plugin.
func Run() string { return policy.Name() }
