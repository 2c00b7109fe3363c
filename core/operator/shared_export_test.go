package operator

// SetGCBeforeDelete installs a hook the shared-pool collector calls after its final check and
// right before a delete (race tests); the returned function removes it.
func SetGCBeforeDelete(f func(kind, name string)) (restore func()) {
	gcBeforeDelete.Store(&f)
	return func() { gcBeforeDelete.Store(nil) }
}
