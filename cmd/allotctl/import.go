package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/allot-ipam/allot/core/importer"
	"github.com/allot-ipam/allot/core/k8s"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const importLong = `Import reads the IPAM objects of Cilium (CiliumPodIPPool, CiliumNode), Spiderpool
(SpiderIPPool, SpiderSubnet, SpiderReservedIP, SpiderEndpoint) and ClusterCIDR
(networking.k8s.io/v1alpha1 ClusterCIDR, Google Distributed Cloud's ClusterCIDRConfig, and
the Nodes' spec.podCIDRs) and writes the equivalent allot objects, so that a migration moves
no running pod: a CiliumNode's blocks become its AllotNode's blocks, a Spiderpool pool's
allocated addresses become AddressClaims for the same pods, and Nodes keep their pod CIDRs.

The peer objects come from the cluster (its CRDs need not be allot's) or, with -f, from
files (YAML or JSON, multi-document, Lists, directories; "-" is stdin). Whatever cannot be
mapped is printed as a warning naming the object and the field; invalid input is an error
naming the field, and nothing is written.

--dry-run prints what would be created or updated as a unified diff against the cluster and
changes nothing. --local prints the allot objects as YAML without contacting any cluster.
An existing allot object is updated in place: an AllotNode keeps its blocks and gains the
imported ones; an AddressClaim held by another pod is an error.`

type importOptions struct {
	files      []string
	kubeconfig string
	dryRun     bool
	local      bool
}

func (o *options) importCommand() *cobra.Command {
	im := &importOptions{}
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Import Cilium, Spiderpool and ClusterCIDR IPAM objects as allot objects (no pod moves)",
		Long:  importLong,
		Example: `  allotctl import --dry-run                 # diff against the cluster, from its peer objects
  allotctl import                           # write them
  allotctl import -f cilium-dump.yaml --local   # print the allot objects only`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
			defer cancel()
			return im.run(ctx, c.OutOrStdout(), c.ErrOrStderr(), c.InOrStdin(), o)
		},
	}
	cmd.Flags().StringArrayVarP(&im.files, "filename", "f", nil, "file or directory of peer objects (repeatable; - is stdin); default: read them from the cluster")
	cmd.Flags().StringVar(&im.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	cmd.Flags().BoolVar(&im.dryRun, "dry-run", false, "print the changes as a unified diff against the cluster; change nothing")
	cmd.Flags().BoolVar(&im.local, "local", false, "with -f: print the allot objects as YAML; contact no cluster")
	return cmd
}

func (im *importOptions) run(ctx context.Context, out, errOut io.Writer, stdin io.Reader, o *options) error {
	if im.local && len(im.files) == 0 {
		return errors.New("--local: needs -f (without a cluster the peer objects come from files)")
	}
	if im.local && im.dryRun {
		return errors.New("--local and --dry-run: choose one")
	}
	var rc *rest.Config
	if !im.local {
		var err error
		if rc, err = restConfig(im.kubeconfig, o); err != nil {
			return err
		}
	}
	var peers []*unstructured.Unstructured
	var err error
	if len(im.files) > 0 {
		peers, err = readFiles(im.files, stdin)
	} else {
		peers, err = readCluster(ctx, rc, errOut)
	}
	if err != nil {
		return err
	}
	res, err := importer.Import(peers)
	if err != nil {
		return err
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(errOut, "warning:", w.String())
	}
	if im.local {
		return printYAML(out, res.Objects)
	}
	cl, err := client.New(rc, client.Options{Scheme: k8s.NewScheme()})
	if err != nil {
		return err
	}
	return apply(ctx, cl, res.Objects, im.dryRun, out)
}

func restConfig(kubeconfig string, o *options) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	rc.Timeout = o.timeout
	return rc, nil
}

// readFiles decodes every file named, walking directories for *.yaml, *.yml and *.json.
func readFiles(paths []string, stdin io.Reader) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	add := func(name string, data []byte) error {
		objs, err := importer.Decode(name, data)
		out = append(out, objs...)
		return err
	}
	for _, p := range paths {
		if p == "-" {
			data, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("-f -: %w", err)
			}
			if err := add("<stdin>", data); err != nil {
				return nil, err
			}
			continue
		}
		err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			ext := strings.ToLower(filepath.Ext(path))
			if d.IsDir() || (path != p && !slices.Contains([]string{".yaml", ".yml", ".json"}, ext)) {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return add(path, data)
		})
		if err != nil {
			return nil, fmt.Errorf("-f %s: %w", p, err)
		}
	}
	return out, nil
}

// readCluster lists every kind the importer reads. A kind the cluster does not serve (its
// peer is not installed) is skipped, and said so.
func readCluster(ctx context.Context, rc *rest.Config, errOut io.Writer) ([]*unstructured.Unstructured, error) {
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, s := range importer.Sources {
		gvr := s.GVK.GroupVersion().WithResource(s.Resource)
		list, err := dc.Resource(gvr).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			fmt.Fprintf(errOut, "note: %s is not served by the cluster; none imported\n", gvr.GroupResource())
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", gvr.GroupResource(), err)
		}
		for i := range list.Items {
			u := list.Items[i]
			if u.GetKind() == "" {
				u.SetGroupVersionKind(s.GVK)
			}
			out = append(out, &u)
		}
	}
	return out, nil
}
