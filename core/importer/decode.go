package importer

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Decode reads the objects of one file: YAML (multi-document) or JSON, objects or Lists of
// them (kubectl get -o yaml). Every object needs apiVersion, kind and metadata.name; an
// error names the file, the document and the field.
func Decode(name string, data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, doc, err)
		}
		if len(m) == 0 {
			continue // an empty document (a trailing ---)
		}
		objs, err := objectsOf(m)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, doc, err)
		}
		out = append(out, objs...)
	}
}

func objectsOf(m map[string]any) ([]*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{Object: m}
	if err := checkObject(u); err != nil {
		return nil, err
	}
	if !u.IsList() {
		if u.GetName() == "" {
			return nil, fmt.Errorf("%s: metadata.name: must not be empty", u.GetKind())
		}
		return []*unstructured.Unstructured{u}, nil
	}
	items, ok := m["items"].([]any)
	if !ok {
		return nil, fmt.Errorf("%s: items: not a list", u.GetKind())
	}
	var out []*unstructured.Unstructured
	for i, it := range items {
		im, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: items[%d]: not an object", u.GetKind(), i)
		}
		objs, err := objectsOf(im)
		if err != nil {
			return nil, fmt.Errorf("items[%d]: %w", i, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// checkObject refuses what unstructured's getters would silently read as empty.
func checkObject(u *unstructured.Unstructured) error {
	for _, f := range []string{"apiVersion", "kind"} {
		v, ok := u.Object[f].(string)
		if !ok || v == "" {
			return fmt.Errorf("%s: must be a non-empty string", f)
		}
	}
	if md, ok := u.Object["metadata"]; ok {
		m, ok := md.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: metadata: not an object", u.GetKind())
		}
		for _, f := range []string{"name", "namespace"} {
			if v, ok := m[f]; ok {
				if _, ok := v.(string); !ok {
					return fmt.Errorf("%s: metadata.%s: not a string", u.GetKind(), f)
				}
			}
		}
		for _, f := range []string{"labels", "annotations"} {
			if v, ok := m[f]; ok && v != nil {
				if _, _, err := unstructured.NestedStringMap(m, f); err != nil {
					return fmt.Errorf("%s: metadata.%s: %w", u.GetKind(), f, err)
				}
			}
		}
	}
	return nil
}
