package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/allot-ipam/allot/core/importer"
	"github.com/pmezard/go-difflib/difflib"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// change is one object an import writes: desired is what the cluster should hold,
// existing what it holds (nil: to be created), imported what the import made of the peers.
type change struct {
	existing, desired, imported client.Object
}

// plan compares the imported objects with the cluster's.
func plan(ctx context.Context, cl client.Client, objs []client.Object) ([]change, error) {
	var out []change
	for _, d := range objs {
		c, changed, err := planOne(ctx, cl, d)
		if err != nil {
			return nil, err
		}
		if changed {
			out = append(out, c)
		}
	}
	return out, nil
}

func planOne(ctx context.Context, cl client.Client, d client.Object) (change, bool, error) {
	gvk := d.GetObjectKind().GroupVersionKind()
	ro, err := cl.Scheme().New(gvk)
	if err != nil {
		return change{}, false, fmt.Errorf("%s: %w", gvk.Kind, err)
	}
	e := ro.(client.Object)
	err = cl.Get(ctx, client.ObjectKeyFromObject(d), e)
	if apierrors.IsNotFound(err) {
		return change{desired: d, imported: d}, true, nil
	}
	if err != nil {
		return change{}, false, fmt.Errorf("get %s %s: %w", gvk.Kind, d.GetName(), err)
	}
	e.GetObjectKind().SetGroupVersionKind(gvk)
	m, changed, err := importer.Merge(e, d)
	if err != nil {
		return change{}, false, err
	}
	m.GetObjectKind().SetGroupVersionKind(gvk)
	return change{existing: e, desired: m, imported: d}, changed, nil
}

// apply writes the plan (or, with dryRun, prints it as a diff). Objects are written in
// importer.Order; a status the import carries (ENI addresses in use, a subnet's
// allocations) is written after its object.
func apply(ctx context.Context, cl client.Client, objs []client.Object, dryRun bool, out io.Writer) error {
	changes, err := plan(ctx, cl, objs)
	if err != nil {
		return err
	}
	if dryRun {
		for _, c := range changes {
			if err := printDiff(out, c); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "# dry run: %d of %d objects would change; nothing written\n", len(changes), len(objs))
		return nil
	}
	for _, c := range changes {
		kind, name := c.desired.GetObjectKind().GroupVersionKind().Kind, c.desired.GetName()
		verb := "created"
		if c.existing != nil {
			verb = "updated"
		}
		if err := write(ctx, cl, c); err != nil {
			return fmt.Errorf("%s %s: %w", kind, name, err)
		}
		fmt.Fprintf(out, "%s %s %s\n", strings.ToLower(kind), name, verb)
	}
	fmt.Fprintf(out, "# %d of %d objects written\n", len(changes), len(objs))
	return nil
}

// write creates or updates one object and its status. A conflict (the operator or an agent
// wrote the object meanwhile) merges the import over the object as it is now and retries.
func write(ctx context.Context, cl client.Client, c change) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		w := c.desired.DeepCopyObject().(client.Object)
		var err error
		if c.existing == nil {
			err = cl.Create(ctx, w)
		} else {
			err = cl.Update(ctx, w)
		}
		if err == nil {
			err = writeStatus(ctx, cl, c.desired, w)
		}
		if apierrors.IsConflict(err) {
			next, changed, perr := planOne(ctx, cl, c.imported)
			if perr != nil {
				return perr
			}
			if !changed {
				return nil
			}
			c = next
		}
		return err
	})
}

// writeStatus copies desired's status onto written (fresh from the API server, which
// dropped the status of a Create or Update) when it carries one.
func writeStatus(ctx context.Context, cl client.Client, desired, written client.Object) error {
	ds, ok, err := statusOf(desired)
	if err != nil || !ok {
		return err
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(written)
	if err != nil {
		return err
	}
	u["status"] = ds
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, written); err != nil {
		return err
	}
	return cl.Status().Update(ctx, written)
}

func statusOf(o client.Object) (any, bool, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, false, err
	}
	s, ok := u["status"].(map[string]any)
	return s, ok && len(s) > 0, nil
}

// manifest is an object as the diff and --local show it: what the import decides, without
// the server's bookkeeping.
func manifest(o client.Object) (string, error) {
	if o == nil {
		return "", nil
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return "", err
	}
	md, _ := u["metadata"].(map[string]any)
	keep := map[string]any{"name": md["name"]}
	for _, k := range []string{"namespace", "labels", "annotations"} {
		if v, ok := md[k]; ok {
			keep[k] = v
		}
	}
	u["metadata"] = keep
	prune(u)
	gvk := o.GetObjectKind().GroupVersionKind()
	u["apiVersion"], u["kind"] = gvk.GroupVersion().String(), gvk.Kind
	b, err := yaml.Marshal(u)
	return string(b), err
}

// prune drops empty objects (an AllotNode's "pools: {}"), which say nothing.
func prune(m map[string]any) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			prune(sub)
			if len(sub) == 0 {
				delete(m, k)
			}
		}
	}
}

func printDiff(out io.Writer, c change) error {
	a, err := manifest(c.existing)
	if err != nil {
		return err
	}
	b, err := manifest(c.desired)
	if err != nil {
		return err
	}
	name := c.desired.GetObjectKind().GroupVersionKind().Kind + "/" + c.desired.GetName()
	from := "a/" + name
	if c.existing == nil {
		from = "/dev/null"
	}
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(a), B: difflib.SplitLines(b),
		FromFile: from, ToFile: "b/" + name, Context: 3})
	if err != nil {
		return err
	}
	_, err = io.WriteString(out, d)
	return err
}

func printYAML(out io.Writer, objs []client.Object) error {
	for _, o := range objs {
		m, err := manifest(o)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(out, "---\n%s", m); err != nil {
			return err
		}
	}
	return nil
}
