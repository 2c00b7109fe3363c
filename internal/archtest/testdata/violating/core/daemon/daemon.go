// Package daemon breaks "core depends on no plugin" through core/operator.
package daemon

import "example.com/violating/core/operator"

// Run uses core/operator, which uses a plugin.
func Run() string { return operator.Run() }
