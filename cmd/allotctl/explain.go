package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/client"
	"github.com/allot-ipam/allot/core/k8s"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// explainFlags are allotctl explain's own flags.
type explainFlags struct {
	ifName, network, file, kubeconfig string
	pools, ips                        []string
	dryRun                            bool
}

func (o *options) explainCommand() *cobra.Command {
	f := &explainFlags{}
	cmd := &cobra.Command{
		Use:   "explain (pod NAMESPACE/NAME | container ID | --dry-run -f pod.yaml)",
		Short: "Why a pod got its address, or no address: the policy chain, every pool's verdict, the block and address",
		Long: `explain asks the node's allotd how it decided a pod's ADD: each policy of the chain with
its answer, cause and reason, every pool the policy saw (taken, candidate, exhausted, disabled,
rejected by a policy and why), then the block and address chosen, or the error. allotd keeps the
last decision of each pod interface it served since it started.

With --dry-run -f pod.yaml it decides now, for a pod that may not exist yet, taking and
writing nothing, and says what an ADD would get.

In Kubernetes each node's agent knows only its own pods: run allotctl on the pod's node (in the
agent's pod: kubectl exec). When the pod ran elsewhere, allotctl names the node and the agent
pod to ask.`,
		Args: cobra.RangeArgs(0, 2),
		RunE: func(cmd *cobra.Command, args []string) error { return o.runExplain(cmd, f, args) },
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.ifName, "interface", "i", "", "the pod interface (CNI_IFNAME); default: every interface recorded (eth0 for a dry run)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "decide now for the pod of -f, taking nothing")
	fl.StringVarP(&f.file, "filename", "f", "", "pod manifest (YAML or JSON; - for stdin) for --dry-run")
	fl.StringVar(&f.network, "network", "allot", "CNI network name for --dry-run (the network config's name)")
	fl.StringSliceVar(&f.pools, "pools", nil, "pools of the CNI ipam config for --dry-run")
	fl.StringSliceVar(&f.ips, "ip", nil, "addresses the runtime asks for, for --dry-run")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig to find the node of a pod this node did not serve (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	return cmd
}

func (o *options) runExplain(cmd *cobra.Command, f *explainFlags, args []string) error {
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("--output: %q is not table or json", o.output)
	}
	req, err := f.request(args, cmd.InOrStdin())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	c := client.New(o.socket)
	defer c.Close()
	resp, err := c.Explain(ctx, req)
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeNotFound && req.Pod.Name != "" {
			return fmt.Errorf("%w%s", err, f.elsewhere(ctx, req.Pod))
		}
		return err
	}
	if o.output == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(resp)
	}
	for i, e := range resp.Explanations {
		if i > 0 {
			fmt.Fprintln(cmd.OutOrStdout())
		}
		if err := writeExplanation(cmd.OutOrStdout(), e); err != nil {
			return err
		}
	}
	return nil
}

// request builds the explain request from the arguments and flags; errors name them.
func (f *explainFlags) request(args []string, stdin io.Reader) (*api.ExplainRequest, error) {
	if f.dryRun {
		if len(args) > 0 {
			return nil, fmt.Errorf("--dry-run: takes the pod from -f, not from arguments %q", args)
		}
		if f.file == "" {
			return nil, errors.New("--dry-run: -f pod.yaml is required")
		}
		d, err := f.dryRunRequest(stdin)
		if err != nil {
			return nil, err
		}
		return &api.ExplainRequest{DryRun: d}, nil
	}
	if f.file != "" {
		return nil, errors.New("-f: only with --dry-run")
	}
	if len(args) != 2 {
		return nil, errors.New("usage: allotctl explain pod NAMESPACE/NAME, or explain container ID")
	}
	switch args[0] {
	case "pod", "pods", "po":
		ns, name, ok := strings.Cut(args[1], "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("pod: %q is not NAMESPACE/NAME", args[1])
		}
		return &api.ExplainRequest{Pod: api.PodRef{Namespace: ns, Name: name}, Owner: api.Owner{IfName: f.ifName}}, nil
	case "container":
		return &api.ExplainRequest{Owner: api.Owner{ContainerID: args[1], IfName: f.ifName}}, nil
	}
	return nil, fmt.Errorf("%q: explain takes pod NAMESPACE/NAME or container ID", args[0])
}

// dryRunRequest reads the pod manifest of -f into a dry-run ADD.
func (f *explainFlags) dryRunRequest(stdin io.Reader) (*api.DryRun, error) {
	var b []byte
	var err error
	if f.file == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(f.file)
	}
	if err != nil {
		return nil, fmt.Errorf("-f: %w", err)
	}
	pod, err := parsePod(b)
	if err != nil {
		return nil, fmt.Errorf("-f %s: %w", f.file, err)
	}
	ifName := f.ifName
	if ifName == "" {
		ifName = "eth0"
	}
	d := &api.DryRun{Labels: pod.Labels, Annotations: pod.Annotations,
		Request: api.AllocateRequest{Owner: api.Owner{ContainerID: "dry-run", IfName: ifName}, Network: f.network,
			Pod: api.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, Pools: f.pools, IPs: f.ips}}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		d.OwnerKind, d.OwnerName = ref.Kind, ref.Name
	}
	return d, nil
}

// parsePod reads one Pod (YAML or JSON); the namespace defaults to "default" as kubectl's.
func parsePod(b []byte) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(b, &pod); err != nil {
		return nil, err
	}
	if pod.Kind != "Pod" {
		return nil, fmt.Errorf("kind: %q, want Pod", pod.Kind)
	}
	if pod.Name == "" && pod.GenerateName == "" {
		return nil, errors.New("metadata.name: must not be empty")
	}
	if pod.Name == "" {
		pod.Name = pod.GenerateName + "dry-run"
	}
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	return &pod, nil
}

// elsewhere says which node and agent to ask about a pod this node has no record of, when the
// cluster can be read; otherwise nothing.
func (f *explainFlags) elsewhere(ctx context.Context, p api.PodRef) string {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return ""
	}
	cl, err := ctrlclient.New(rc, ctrlclient.Options{Scheme: k8s.NewScheme()})
	if err != nil {
		return ""
	}
	var pod corev1.Pod
	if err := cl.Get(ctx, ctrlclient.ObjectKey{Namespace: p.Namespace, Name: p.Name}, &pod); err != nil {
		return fmt.Sprintf(" (and the API server: %v)", err)
	}
	return hintFor(&pod, agentOn(ctx, cl, pod.Spec.NodeName), p)
}

// agentOn finds the allot agent pod of node (the chart's label), or nil.
func agentOn(ctx context.Context, cl ctrlclient.Client, node string) *corev1.Pod {
	if node == "" {
		return nil
	}
	var l corev1.PodList
	if err := cl.List(ctx, &l, ctrlclient.MatchingLabels{"app.kubernetes.io/name": "allot-agent"}); err != nil {
		return nil
	}
	for i := range l.Items {
		if l.Items[i].Spec.NodeName == node {
			return &l.Items[i]
		}
	}
	return nil
}

// hintFor tells where to ask about pod.
func hintFor(pod *corev1.Pod, agent *corev1.Pod, p api.PodRef) string {
	node := pod.Spec.NodeName
	if node == "" {
		return fmt.Sprintf("; pod %s/%s is not scheduled to a node yet: no ADD has run (try --dry-run -f)", p.Namespace, p.Name)
	}
	if agent == nil {
		return fmt.Sprintf("; pod %s/%s runs on node %s: run allotctl explain on that node", p.Namespace, p.Name, node)
	}
	return fmt.Sprintf("; pod %s/%s runs on node %s: ask its agent with\n  kubectl -n %s exec %s -- allotctl explain pod %s/%s",
		p.Namespace, p.Name, node, agent.Namespace, agent.Name, p.Namespace, p.Name)
}
