// Package ociimage builds container images without a daemon or a registry, on
// github.com/google/go-containerregistry, and writes them as an OCI image layout in one tar
// file that `ctr images import` (containerd) loads and `crane push` uploads.
//
// Builds are reproducible: the same files give the same bytes, so the same commit gives the
// same image digest. Layer entries are sorted, owned by root, dated SOURCE_DATE_EPOCH (the
// reproducible-builds.org convention; Unix 0 when unset), and compressed with a fixed gzip
// header; the config's dates are the same.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of a layer. Exactly one of Data, Src, Link and Dir is set.
type File struct {
	// Path inside the image, without a leading slash: "usr/local/bin/allotd".
	Path string
	// Mode holds the permission bits; 0 means 0o644 for files and 0o755 for directories.
	Mode int64
	// Data is the content, or Src a host file to read it from.
	Data []byte
	Src  string
	// Link makes the entry a symbolic link to Link.
	Link string
	// Dir makes the entry a directory.
	Dir bool
}

// Epoch is the date of every entry and of the image: SOURCE_DATE_EPOCH, or Unix 0.
func Epoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("ociimage: SOURCE_DATE_EPOCH %q: not a number of seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// Layer builds a layer of files: a tar with every parent directory, sorted by path, then
// gzip-compressed. Two entries with one path are an error.
func Layer(files []File) (v1.Layer, error) {
	epoch, err := Epoch()
	if err != nil {
		return nil, err
	}
	byPath := map[string]File{}
	for i, f := range files {
		p := path.Clean(strings.TrimPrefix(f.Path, "/"))
		if p == "." || p == "" || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("ociimage: files[%d].path %q: not a path inside the image", i, f.Path)
		}
		kinds := 0
		for _, set := range []bool{f.Data != nil, f.Src != "", f.Link != "", f.Dir} {
			if set {
				kinds++
			}
		}
		if kinds != 1 { // an empty regular file is Data: []byte{}
			return nil, fmt.Errorf("ociimage: files[%d] (%s): set exactly one of data, src, link, dir", i, p)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("ociimage: files[%d]: %s given twice", i, p)
		}
		f.Path = p
		byPath[p] = f
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d, Dir: true}
			} else if !byPath[d].Dir {
				return nil, fmt.Errorf("ociimage: %s is a parent directory of %s and also a file", d, p)
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, p := range paths {
		f := byPath[p]
		h := &tar.Header{Name: p, ModTime: epoch, Format: tar.FormatPAX, Mode: f.Mode}
		var data []byte
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, p+"/"
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			data = f.Data
			if f.Src != "" {
				if data, err = os.ReadFile(f.Src); err != nil {
					return nil, fmt.Errorf("ociimage: %s: %w", p, err)
				}
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("ociimage: %s: %w", p, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("ociimage: %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return gzipLayer(raw.Bytes())
}

// gzipLayer compresses an uncompressed tar with a fixed header (no name, no date) at a fixed
// level, so equal tars give equal blobs.
func gzipLayer(uncompressed []byte) (v1.Layer, error) {
	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(uncompressed); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	diffID, _, err := v1.SHA256(bytes.NewReader(uncompressed))
	if err != nil {
		return nil, err
	}
	return &layer{compressed: z.Bytes(), diffID: diffID}, nil
}

// layer is a gzip-compressed tar held in memory.
type layer struct {
	compressed []byte
	diffID     v1.Hash
}

func (l *layer) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(l.compressed))
	return h, err
}
func (l *layer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *layer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.compressed)), nil
}
func (l *layer) Uncompressed() (io.ReadCloser, error) {
	zr, err := gzip.NewReader(bytes.NewReader(l.compressed))
	if err != nil {
		return nil, err
	}
	return zr, nil
}
func (l *layer) Size() (int64, error)                { return int64(len(l.compressed)), nil }
func (l *layer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

// Config is the runtime part of an image's configuration.
type Config struct {
	Entrypoint, Cmd, Env []string
	WorkingDir, User     string
	Labels               map[string]string
}

// Image builds a linux/arch image (OCI media types) of the layers, bottom first.
func Image(arch string, cfg Config, layers ...v1.Layer) (v1.Image, error) {
	epoch, err := Epoch()
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = arch, "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, Env: cfg.Env, WorkingDir: cfg.WorkingDir, User: cfg.User, Labels: cfg.Labels}
	if len(cf.Config.Env) == 0 {
		cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	cf.History = nil
	for range layers {
		cf.History = append(cf.History, v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "allot ociimage"})
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	return img, nil
}

// WriteOCITar writes the images, each under its full reference, as an OCI image layout in
// one tar file: oci-layout, index.json (one manifest per reference, annotated with
// io.containerd.image.name = the full reference, which containerd's import uses as the
// image name, and org.opencontainers.image.ref.name = the tag) and blobs/sha256/*. The file
// is written to a temporary name and renamed into place.
func WriteOCITar(dst string, images map[string]v1.Image) error {
	refs := make([]string, 0, len(images))
	for r := range images {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	type desc struct {
		MediaType   types.MediaType   `json:"mediaType"`
		Digest      v1.Hash           `json:"digest"`
		Size        int64             `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
		Platform    *v1.Platform      `json:"platform,omitempty"`
	}
	blobs := map[v1.Hash][]byte{}
	var manifests []desc
	for _, ref := range refs {
		img := images[ref]
		tag, err := tagOf(ref)
		if err != nil {
			return err
		}
		raw, err := img.RawManifest()
		if err != nil {
			return fmt.Errorf("ociimage: %s: manifest: %w", ref, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		mt, err := img.MediaType()
		if err != nil {
			return err
		}
		cfgName, err := img.ConfigName()
		if err != nil {
			return err
		}
		cfgRaw, err := img.RawConfigFile()
		if err != nil {
			return err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		blobs[digest], blobs[cfgName] = raw, cfgRaw
		ls, err := img.Layers()
		if err != nil {
			return err
		}
		for _, l := range ls {
			d, err := l.Digest()
			if err != nil {
				return err
			}
			if _, ok := blobs[d]; ok {
				continue
			}
			rc, err := l.Compressed()
			if err != nil {
				return err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return fmt.Errorf("ociimage: %s: layer %s: %w", ref, d, err)
			}
			blobs[d] = b
		}
		manifests = append(manifests, desc{
			MediaType: mt, Digest: digest, Size: int64(len(raw)),
			Annotations: map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
			Platform:    &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
		})
	}
	index, err := json.Marshal(struct {
		SchemaVersion int             `json:"schemaVersion"`
		MediaType     types.MediaType `json:"mediaType"`
		Manifests     []desc          `json:"manifests"`
	}{2, types.OCIImageIndex, manifests})
	if err != nil {
		return err
	}

	epoch, err := Epoch()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	defer os.Remove(tmp.Name())
	tw := tar.NewWriter(tmp)
	add := func(name string, data []byte, dir bool) error {
		h := &tar.Header{Name: name, Mode: 0o644, ModTime: epoch, Typeflag: tar.TypeReg, Size: int64(len(data)), Format: tar.FormatPAX}
		if dir {
			h.Mode, h.Typeflag, h.Size = 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	err = errors.Join(
		add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`), false),
		add("index.json", index, false),
		add("blobs/", nil, true),
		add("blobs/sha256/", nil, true),
	)
	digests := make([]v1.Hash, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Slice(digests, func(i, j int) bool { return digests[i].Hex < digests[j].Hex })
	for _, d := range digests {
		if err == nil {
			err = add("blobs/sha256/"+d.Hex, blobs[d], false)
		}
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("ociimage: writing %s: %w", dst, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	return nil
}

// tagOf is the tag of a full reference (registry/repo:tag).
func tagOf(ref string) (string, error) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") || i == len(ref)-1 {
		return "", fmt.Errorf("ociimage: reference %q has no tag", ref)
	}
	return ref[i+1:], nil
}
