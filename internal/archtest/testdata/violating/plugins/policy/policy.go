// Package policy breaks "plugins import the sdk ..., not core".
package policy

import "example.com/violating/core/store"

// Name uses core.
func Name() string { store.Put(); return "p" }
