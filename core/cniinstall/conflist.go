package cniinstall

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteConfig makes dir/name hold exactly data (mode 0644), atomically, creating dir if
// needed. A file that already holds data is not touched (containerd reloads its CNI
// configuration on every change event of the directory); one with other content (an older
// version's) is replaced. It reports whether it wrote.
func WriteConfig(dir, name string, data []byte) (bool, error) {
	path := filepath.Join(dir, name)
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm() == 0o644 {
			return false, nil
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("cniinstall: read %s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("cniinstall: configuration directory %s: %w", dir, err)
	}
	if err := WriteFile(dir, name, data, 0o644); err != nil {
		return false, fmt.Errorf("cniinstall: %w", err)
	}
	return true, nil
}

// RemoveConfig removes dir/name; a missing file is not an error. It reports whether it
// removed one.
func RemoveConfig(dir, name string) (bool, error) {
	path := filepath.Join(dir, name)
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cniinstall: remove %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return true, fmt.Errorf("cniinstall: %w", err)
	}
	return true, nil
}
