package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/allot-ipam/allot/core/cniinstall"
	"github.com/allot-ipam/allot/core/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// The agent as a DaemonSet: it writes the node's CNI network configuration once it serves,
// and at stop either leaves everything in place (a rolling update, a node reboot: the pods
// keep working and the next agent takes over) or uninstalls (the DaemonSet is gone).
//
// The network configuration is what makes the kubelet report the node's network ready and
// the runtime send ADDs, so it appears only once an ADD can be answered: the API socket
// listens, every allocation is restored from the store, the informer caches have synced and
// the node's blocks are read from its AllotNode, and the datapath masquerades them. An older
// version's file, or a missing one, is rewritten then.
//
// Uninstall goes in the order that never leaves a pod half set up: the network
// configuration first (the runtime stops sending ADDs), then the binaries install-cni put
// in place, then the datapath's rules and programs.

var (
	podsResource        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	daemonSetsResource  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
	uninstallReadBudget = 10 * time.Second
	// followerGrace is how long a stop refused by RBAC waits for the DaemonSet watch.
	followerGrace = 5 * time.Second
)

// ownerReader reads object metadata only (get on pods and daemonsets; no list, no watch).
type ownerReader interface {
	Pod(ctx context.Context, namespace, name string) (*metav1.PartialObjectMetadata, error)
	DaemonSet(ctx context.Context, namespace, name string) (*metav1.PartialObjectMetadata, error)
}

type metadataReader struct{ c metadata.Interface }

func newOwnerReader(cfg *rest.Config) (metadataReader, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	c, err := metadata.NewForConfig(cfg)
	if err != nil {
		return metadataReader{}, fmt.Errorf("cni.uninstall: API client: %w", err)
	}
	return metadataReader{c}, nil
}

func (r metadataReader) Pod(ctx context.Context, ns, name string) (*metav1.PartialObjectMetadata, error) {
	return r.c.Resource(podsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

func (r metadataReader) DaemonSet(ctx context.Context, ns, name string) (*metav1.PartialObjectMetadata, error) {
	return r.c.Resource(daemonSetsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

// uninstallVerdict decides, for cni.uninstall auto, whether the agent's DaemonSet is gone:
// its Pod's controller is a DaemonSet that no longer exists, exists with another UID (deleted
// and created again: the old pods go), or is being deleted. Anything it cannot establish
// (no Pod name, the API server does not answer, the Pod is already gone, it has no
// DaemonSet controller) keeps everything: a stale configuration after an uninstall is a
// small leftover, a removed one during a rolling update takes the node's pod network down.
//
// err is the API error that left the question open, if any.
func uninstallVerdict(ctx context.Context, r ownerReader, namespace, name string) (bool, string, error) {
	if namespace == "" || name == "" {
		return false, "the agent's own Pod is unknown (cni.podName / POD_NAME, cni.podNamespace / POD_NAMESPACE unset)", nil
	}
	pod, err := r.Pod(ctx, namespace, name)
	if err != nil {
		return false, fmt.Sprintf("reading the agent's Pod %s/%s: %v", namespace, name, err), err
	}
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil {
		return false, fmt.Sprintf("Pod %s/%s has no controller", namespace, name), nil
	}
	if gv, _ := schema.ParseGroupVersion(ref.APIVersion); ref.Kind != "DaemonSet" || gv.Group != "apps" {
		return false, fmt.Sprintf("Pod %s/%s is controlled by %s %s, not a DaemonSet", namespace, name, ref.Kind, ref.Name), nil
	}
	ds, err := r.DaemonSet(ctx, namespace, ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("DaemonSet %s/%s is gone", namespace, ref.Name), nil
	case err != nil:
		return false, fmt.Sprintf("reading DaemonSet %s/%s: %v", namespace, ref.Name, err), err
	case ds.UID != ref.UID:
		return true, fmt.Sprintf("DaemonSet %s/%s was deleted and created again (UID %s, the Pod's is %s)", namespace, ref.Name, ds.UID, ref.UID), nil
	case ds.DeletionTimestamp != nil:
		return true, fmt.Sprintf("DaemonSet %s/%s is being deleted", namespace, ref.Name), nil
	}
	return false, fmt.Sprintf("DaemonSet %s/%s exists (a rolling update, a node drain or reboot)", namespace, ref.Name), nil
}

// decideUninstall applies cni.uninstall.
func (d *AgentDaemon) decideUninstall(ctx context.Context) (bool, string) {
	c := d.cfg.CNI
	switch c.Uninstall {
	case config.UninstallAlways:
		return true, "cni.uninstall is always"
	case config.UninstallNever:
		return false, "cni.uninstall is never"
	}
	if d.owners == nil {
		return false, "no API client"
	}
	if d.follower != nil {
		if gone, why, _ := d.follower.verdict(); gone {
			return true, why
		}
	}
	ctx, cancel := context.WithTimeout(ctx, uninstallReadBudget)
	defer cancel()
	uninstall, why, err := uninstallVerdict(ctx, d.owners, c.PodNamespace, c.PodName)
	if (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)) && d.follower != nil {
		// The agent's identity or its rights were just revoked: what helm uninstall does
		// right after deleting the DaemonSet. The watch may not have delivered the delete
		// yet; give it a moment.
		if gone, fwhy := d.follower.wait(ctx, followerGrace); gone {
			return true, fwhy
		}
		return false, why + "; the agent's watch of its DaemonSet saw no deletion either"
	}
	return uninstall, why
}

// atStop runs when the agent begins to shut down: it decides whether to uninstall, removes
// the network configuration and the binaries if so, and tells close what to do with the
// datapath.
func (d *AgentDaemon) atStop(ctx context.Context) {
	d.stopBringUp()
	uninstall, why := d.decideUninstall(ctx)
	if !uninstall {
		d.datapathAtStop.Store(stopKeep)
		d.log.Info("stopping without uninstalling: the network configuration, CNI binaries and datapath stay for the next agent", "reason", why)
		return
	}
	d.log.Info("uninstalling from the node", "reason", why)
	d.datapathAtStop.Store(stopUninstall)
	c := d.cfg.CNI
	if err := d.uninstallCNI(c); err != nil {
		d.log.Error("uninstall", "err", err)
	}
	if d.rtr != nil {
		if res, err := d.rtr.RemoveAll(); err != nil {
			d.log.Error("uninstall: routes to other nodes", "err", err)
		} else {
			d.log.Info("routes to other nodes removed", "removed", res.Removed)
		}
	}
	if d.eniHost != nil {
		if err := d.eniHost.Host.RemoveAll(); err != nil {
			d.log.Error("uninstall: ENI host routing", "err", err)
		} else {
			d.log.Info("ENI host routing removed (pod routes, rules, ENI tables)")
		}
	}
}

// uninstallCNI removes the network configuration, then the binaries.
func (d *AgentDaemon) uninstallCNI(c config.CNI) error {
	var errs []error
	if c.ConfDir != "" {
		removed, err := cniinstall.RemoveConfig(c.ConfDir, c.ConfName)
		if err != nil {
			errs = append(errs, err)
		} else if removed {
			d.log.Info("CNI network configuration removed", "file", c.ConfDir+"/"+c.ConfName)
		}
	}
	if c.BinDir != "" {
		_, err := cniinstall.Uninstall(cniinstall.UninstallOptions{BinDir: c.BinDir, SrcDir: c.SrcDir, Logger: d.log.With("component", "cni")})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// writeConfig writes the network configuration if the agent manages one.
func (d *AgentDaemon) writeConfig() error {
	c := d.cfg.CNI
	if !c.Enabled() {
		return nil
	}
	wrote, err := cniinstall.WriteConfig(c.ConfDir, c.ConfName, []byte(c.Conflist))
	if err != nil {
		return fmt.Errorf("cni.confDir: %w", err)
	}
	if wrote {
		d.log.Info("CNI network configuration written", "file", c.ConfDir+"/"+c.ConfName)
	} else {
		d.log.Info("CNI network configuration already in place", "file", c.ConfDir+"/"+c.ConfName)
	}
	return nil
}
