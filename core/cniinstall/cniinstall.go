// Package cniinstall puts allot's CNI pieces on a node and takes them away again: the
// plugin binaries (allot-cni and, optionally, reference plugins such as bridge and loopback
// shipped in the same image) in the runtime's CNI bin directory, and the network
// configuration list in its configuration directory.
//
// Every file is written the way the runtime can never see half of it: a temporary file in
// the destination directory, fsync, chmod, rename over the final name, fsync of the
// directory. The container runtime may exec a plugin or read the configuration directory at
// any moment (containerd watches it), and a rename is the only change it observes. Replacing
// a running binary this way also avoids ETXTBSY.
//
// A plugin other than allot-cni may already be on the node (the kubernetes-cni package puts
// bridge and loopback in /opt/cni/bin). The first install records, in a hidden directory of
// the bin directory (RecordDir), what was there before each plugin it installs: the original
// file (restored at uninstall), a marker that nothing was there (the plugin is removed), or a
// marker that an identical file was there (left alone). Uninstall also leaves a plugin alone
// when it no longer matches the copy allot ships, i.e. something else replaced it since.
package cniinstall

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

const (
	// DefaultSrcDir is where allot's image keeps the plugin binaries.
	DefaultSrcDir = "/opt/allot/cni/bin"
	// Plugin is allot's own CNI plugin, always installed and always removed.
	Plugin = "allot-cni"
	// RecordDir, inside the bin directory, records what each installed plugin replaced.
	RecordDir = ".allot-install"

	recOrig   = ".orig"   // the file that was there before, restored at uninstall
	recAbsent = ".absent" // nothing was there: removed at uninstall
	recKeep   = ".keep"   // an identical file was there: left at uninstall
)

// Options say what to install where.
type Options struct {
	// BinDir is the runtime's CNI bin directory (the host's /opt/cni/bin, mounted).
	BinDir string
	// SrcDir holds the binaries to copy (DefaultSrcDir when empty).
	SrcDir string
	// Plugins are installed besides allot-cni (e.g. bridge, loopback, portmap).
	Plugins []string
	Logger  *slog.Logger
}

func (o *Options) defaults() {
	if o.SrcDir == "" {
		o.SrcDir = DefaultSrcDir
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Action is what happened to one file.
type Action string

// Actions reported in Result.
const (
	Installed Action = "installed" // written (absent or different before)
	Unchanged Action = "unchanged" // already identical
	Removed   Action = "removed"
	Restored  Action = "restored" // the file from before the install is back
	Kept      Action = "kept"     // left in place (not ours, or replaced since)
	Absent    Action = "absent"   // nothing to remove
)

// FileResult is the outcome for one plugin.
type FileResult struct {
	Name   string
	Path   string
	Action Action
	Reason string
}

// ValidatePluginName refuses names that are not a plain file name.
func ValidatePluginName(name string) error {
	switch {
	case name == "":
		return errors.New("empty plugin name")
	case strings.ContainsAny(name, `/\`), name == ".", name == "..":
		return fmt.Errorf("plugin name %q is not a file name", name)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("plugin name %q starts with a dot", name)
	}
	return nil
}

// names returns allot-cni followed by the other plugins, deduplicated, in order.
func (o *Options) names() ([]string, error) {
	out := []string{Plugin}
	for i, p := range o.Plugins {
		p = strings.TrimSpace(p)
		if p == "" {
			continue // "--plugins ''" (an empty list from a chart) installs allot-cni alone
		}
		if err := ValidatePluginName(p); err != nil {
			return nil, fmt.Errorf("plugins[%d]: %w", i, err)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Install copies allot-cni and the listed plugins from SrcDir into BinDir, atomically and
// with mode 0755; a file already identical is left untouched. Every source is checked
// before anything is written, so a missing plugin installs nothing.
func Install(opts Options) ([]FileResult, error) {
	opts.defaults()
	if opts.BinDir == "" {
		return nil, errors.New("cniinstall: the bin directory is required")
	}
	names, err := opts.names()
	if err != nil {
		return nil, fmt.Errorf("cniinstall: %w", err)
	}
	srcs := make(map[string][]byte, len(names))
	for _, n := range names {
		p := filepath.Join(opts.SrcDir, n)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("cniinstall: source %s: %w", p, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("cniinstall: source %s is not a regular file", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("cniinstall: read source %s: %w", p, err)
		}
		srcs[n] = b
	}
	if err := os.MkdirAll(opts.BinDir, 0o755); err != nil {
		return nil, fmt.Errorf("cniinstall: bin directory %s: %w", opts.BinDir, err)
	}
	var out []FileResult
	for _, n := range names {
		dst := filepath.Join(opts.BinDir, n)
		if n != Plugin {
			if err := record(opts.BinDir, n, srcs[n]); err != nil {
				return out, err
			}
		}
		same, err := sameFile(dst, srcs[n], 0o755)
		if err != nil {
			return out, fmt.Errorf("cniinstall: %s: %w", dst, err)
		}
		if same {
			opts.Logger.Info("CNI plugin already up to date", "plugin", n, "path", dst)
			out = append(out, FileResult{Name: n, Path: dst, Action: Unchanged})
			continue
		}
		if err := WriteFile(opts.BinDir, n, srcs[n], 0o755); err != nil {
			return out, err
		}
		opts.Logger.Info("CNI plugin installed", "plugin", n, "path", dst, "bytes", len(srcs[n]))
		out = append(out, FileResult{Name: n, Path: dst, Action: Installed})
	}
	return out, nil
}

// record notes, on the first install of plugin name, what the bin directory held before.
// Later installs (upgrades) leave the record alone: it describes the node before allot.
func record(binDir, name string, src []byte) error {
	rdir := filepath.Join(binDir, RecordDir)
	for _, suf := range []string{recOrig, recAbsent, recKeep} {
		if _, err := os.Lstat(filepath.Join(rdir, name+suf)); err == nil {
			return nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cniinstall: install record %s: %w", filepath.Join(rdir, name+suf), err)
		}
	}
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return fmt.Errorf("cniinstall: install record directory %s: %w", rdir, err)
	}
	dst := filepath.Join(binDir, name)
	st, err := os.Lstat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return WriteFile(rdir, name+recAbsent, nil, 0o644)
	case err != nil:
		return fmt.Errorf("cniinstall: %s: %w", dst, err)
	}
	if st.Mode().IsRegular() {
		if same, err := sameFile(dst, src, st.Mode().Perm()); err == nil && same {
			return WriteFile(rdir, name+recKeep, nil, 0o644)
		}
	}
	// Something else was there (another version, a symlink): keep it to put it back.
	var orig []byte
	mode := st.Mode().Perm()
	if st.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(dst)
		if err != nil {
			return fmt.Errorf("cniinstall: %s: %w", dst, err)
		}
		tmp := filepath.Join(rdir, "."+name+recOrig+".link")
		_ = os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			return fmt.Errorf("cniinstall: save %s: %w", dst, err)
		}
		if err := os.Rename(tmp, filepath.Join(rdir, name+recOrig)); err != nil {
			return fmt.Errorf("cniinstall: save %s: %w", dst, err)
		}
		return syncDir(rdir)
	}
	if orig, err = os.ReadFile(dst); err != nil {
		return fmt.Errorf("cniinstall: save %s: %w", dst, err)
	}
	return WriteFile(rdir, name+recOrig, orig, mode)
}

// UninstallOptions say what to remove.
type UninstallOptions struct {
	BinDir string
	// SrcDir holds allot's copies (DefaultSrcDir when empty): a plugin that no longer
	// matches its copy was replaced by something else since the install and is kept.
	// Without a readable copy the record alone decides.
	SrcDir string
	Logger *slog.Logger
}

// Uninstall removes allot-cni and undoes every recorded plugin install: the original file is
// restored, a plugin that was absent is removed, one that was identical is left. It is
// idempotent and may be re-run after a crash halfway.
func Uninstall(opts UninstallOptions) ([]FileResult, error) {
	if opts.BinDir == "" {
		return nil, errors.New("cniinstall: the bin directory is required")
	}
	if opts.SrcDir == "" {
		opts.SrcDir = DefaultSrcDir
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var out []FileResult
	var errs []error
	dst := filepath.Join(opts.BinDir, Plugin)
	switch err := os.Remove(dst); {
	case err == nil:
		opts.Logger.Info("CNI plugin removed", "plugin", Plugin, "path", dst)
		out = append(out, FileResult{Name: Plugin, Path: dst, Action: Removed})
	case errors.Is(err, fs.ErrNotExist):
		opts.Logger.Info("CNI plugin already absent", "plugin", Plugin, "path", dst)
		out = append(out, FileResult{Name: Plugin, Path: dst, Action: Absent})
	default:
		errs = append(errs, fmt.Errorf("cniinstall: remove %s: %w", dst, err))
	}

	rdir := filepath.Join(opts.BinDir, RecordDir)
	entries, err := os.ReadDir(rdir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("cniinstall: install records %s: %w", rdir, err))
	}
	for _, e := range entries {
		name, kind := splitRecord(e.Name())
		if kind == "" {
			continue // a temporary file of an interrupted write
		}
		if ValidatePluginName(name) != nil || name == Plugin {
			continue
		}
		r, err := undo(opts, name, kind)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.Action == Kept {
			opts.Logger.Warn("CNI plugin left in place", "plugin", name, "path", r.Path, "reason", r.Reason)
		} else {
			opts.Logger.Info("CNI plugin uninstalled", "plugin", name, "path", r.Path, "action", r.Action)
		}
		out = append(out, r)
	}
	if len(errs) == 0 {
		if err := os.Remove(rdir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cniinstall: remove %s: %w", rdir, err))
		}
	}
	if err := syncDir(opts.BinDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

func splitRecord(file string) (name, kind string) {
	if strings.HasPrefix(file, ".") {
		return "", ""
	}
	for _, k := range []string{recOrig, recAbsent, recKeep} {
		if n, ok := strings.CutSuffix(file, k); ok {
			return n, k
		}
	}
	return "", ""
}

// undo reverts one plugin's install, then drops its record (the last step, so a crash
// before it repeats the step, which is idempotent).
func undo(opts UninstallOptions, name, kind string) (FileResult, error) {
	rdir := filepath.Join(opts.BinDir, RecordDir)
	rec := filepath.Join(rdir, name+kind)
	dst := filepath.Join(opts.BinDir, name)
	res := FileResult{Name: name, Path: dst}
	ours, why, err := stillOurs(dst, filepath.Join(opts.SrcDir, name))
	if err != nil {
		return res, fmt.Errorf("cniinstall: %s: %w", dst, err)
	}
	switch {
	case kind == recKeep:
		res.Action, res.Reason = Kept, "it was on the node before allot installed the same file"
	case !ours:
		res.Action, res.Reason = Kept, why
	case kind == recOrig:
		// The record is the original file (or symlink), in the same file system: a rename
		// puts it back atomically and consumes the record.
		if err := os.Rename(rec, dst); err != nil {
			return res, fmt.Errorf("cniinstall: restore %s from %s: %w", dst, rec, err)
		}
		res.Action = Restored
		return res, syncDir(opts.BinDir)
	default:
		switch err := os.Remove(dst); {
		case err == nil:
			res.Action = Removed
		case errors.Is(err, fs.ErrNotExist):
			res.Action = Absent
		default:
			return res, fmt.Errorf("cniinstall: remove %s: %w", dst, err)
		}
	}
	if err := os.Remove(rec); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("cniinstall: remove install record %s: %w", rec, err)
	}
	return res, nil
}

// stillOurs reports whether dst is still the copy allot installed: identical to the source
// when the source is readable. A missing dst counts as ours (nothing to protect).
func stillOurs(dst, src string) (bool, string, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return true, "", nil // no copy to compare with: the record decides
	}
	st, err := os.Lstat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return true, "", nil
	}
	if err != nil {
		return false, "", err
	}
	if !st.Mode().IsRegular() {
		return false, "replaced by a " + st.Mode().Type().String() + " since the install", nil
	}
	same, err := sameFile(dst, b, st.Mode().Perm())
	if err != nil {
		return false, "", err
	}
	if !same {
		return false, "replaced by another file since the install", nil
	}
	return true, "", nil
}

// sameFile reports whether path is a regular file with exactly data and mode perm.
func sameFile(path string, data []byte, perm fs.FileMode) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !st.Mode().IsRegular() || st.Size() != int64(len(data)) || st.Mode().Perm() != perm {
		return false, nil
	}
	got, err := io.ReadAll(f)
	if err != nil {
		return false, err
	}
	return bytes.Equal(got, data), nil
}

// WriteFile writes data to dir/name atomically: a temporary file in dir (named with a
// leading dot and no recognised extension, so neither libcni nor a PATH lookup picks it
// up), fsync, chmod perm, rename, fsync of dir. On error the temporary file is removed and
// dir/name is as it was.
func WriteFile(dir, name string, data []byte, perm fs.FileMode) (err error) {
	final := filepath.Join(dir, name)
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", final, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", final, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: fsync: %w", final, err)
	}
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: chmod: %w", final, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", final, err)
	}
	if err = os.Rename(tmp, final); err != nil {
		return fmt.Errorf("write %s: rename: %w", final, err)
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
