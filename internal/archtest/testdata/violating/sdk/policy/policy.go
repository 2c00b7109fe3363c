// Package policy breaks "sdk imports nothing of the root module".
package policy

import "example.com/violating/core/store"

// Use uses core.
func Use() { store.Put() }
