package k8se2e

// KubeVirt VMs on shared pools: the VirtualMachine owns its addresses, not its virt-launcher
// pods (Spiderpool's kubevirt static IP, https://spidernet-io.github.io/spiderpool/, "KubeVirt").
// No KubeVirt runs here: minimal VirtualMachine and VirtualMachineInstance CRDs
// (testdata/kubevirt) and pods carrying the owner reference and labels KubeVirt gives
// virt-launcher pods (https://kubevirt.io/user-guide/).

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
	"github.com/allot-ipam/allot/test/k8senv"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

// kubevirtObj creates a kubevirt.io/v1 object of kind in ns, owned (as controller) by owner
// when given.
func (se *sharedEnv) kubevirtObj(kind, ns, name string, owner *unstructured.Unstructured) *unstructured.Unstructured {
	se.t.Helper()
	o := &unstructured.Unstructured{}
	o.SetAPIVersion("kubevirt.io/v1")
	o.SetKind(kind)
	o.SetNamespace(ns)
	o.SetName(name)
	o.Object["spec"] = map[string]any{}
	if owner != nil {
		o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: owner.GetKind(),
			Name: owner.GetName(), UID: owner.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}})
	}
	if err := se.c.Create(context.Background(), o); err != nil {
		se.t.Fatalf("create %s %s/%s: %v", kind, ns, name, err)
	}
	return o
}

// launcher creates a virt-launcher pod of vmi on node, as KubeVirt does: controlled by the
// VirtualMachineInstance, labelled with the VM's name and the VMI's UID.
func (se *sharedEnv) launcher(vmi *unstructured.Unstructured, suffix, node string) *corev1.Pod {
	se.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmi.GetNamespace(), Name: "virt-launcher-" + vmi.GetName() + "-" + suffix,
			Labels: map[string]string{"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": string(vmi.GetUID()),
				"vm.kubevirt.io/name": vmi.GetName()},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance",
				Name: vmi.GetName(), UID: vmi.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "compute", Image: "quay.io/kubevirt/virt-launcher"}}},
	}
	if err := se.c.Create(context.Background(), p); err != nil {
		se.t.Fatal(err)
	}
	return p
}

func (se *sharedEnv) deleteNow(objs ...ctrlclient.Object) {
	se.t.Helper()
	for _, o := range objs {
		if err := se.c.Delete(context.Background(), o, ctrlclient.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
			se.t.Fatalf("delete %s: %v", o.GetName(), err)
		}
	}
}

// claimed reports, per address, the claim holding it (nil: free).
func (se *sharedEnv) claimFor(addr string) *allotv1.AddressClaim {
	se.t.Helper()
	a := netip.MustParsePrefix(addr).Addr()
	if c, ok := se.claims()[a]; ok {
		return &c
	}
	return nil
}

func TestSharedKubeVirt(t *testing.T) {
	se := newSharedEnv(t, map[string]map[string]string{"node-1": nil, "node-2": nil, "node-3": nil})
	ctx := context.Background()
	if err := k8senv.InstallManifests(ctx, se.env.Config, "testdata/kubevirt"); err != nil {
		t.Fatal(err)
	}
	se.startOperator(time.Second)
	se.create(sharedPool("vmnet",
		&allotv1.SharedPoolFamily{Subnet: "10.70.0.0/24", IPs: []string{"10.70.0.10-10.70.0.40"}, Gateway: "10.70.0.1"},
		&allotv1.SharedPoolFamily{Subnet: "fd00:70::/64", IPs: []string{"fd00:70::10-fd00:70::40"}, Gateway: "fd00:70::1"},
		allotv1.PoolSelection{Default: true}))
	n1, n2 := se.startAgent("node-1"), se.startAgent("node-2")
	se.havePools("vmnet/ipv4", "vmnet/ipv6")
	se.namespace("vms", nil, nil)

	vm := se.kubevirtObj("VirtualMachine", "vms", "vm1", nil)
	vmi := se.kubevirtObj("VirtualMachineInstance", "vms", "vm1", vm)
	src := se.launcher(vmi, "abcde", "node-1")
	first := se.add(cniCall{node: n1, pod: src})
	want := first.addrs()
	if len(want) != 2 {
		t.Fatalf("want an IPv4 and an IPv6 address: %s", first)
	}
	if ep := se.endpoint("vms", "vm1"); ep == nil || ep.Spec.VirtualMachine != "vm1" || ep.Spec.PodUID != string(src.UID) {
		t.Fatalf("AllotEndpoint vms/vm1: %+v; want one named after the VM, held by %s", ep, src.Name)
	}
	if c := se.claimFor(want[0]); c == nil || c.Spec.Holder.VirtualMachine != "vm1" {
		t.Fatalf("claim of %s: %+v; want holder.virtualMachine vm1", want[0], c)
	}

	t.Run("live migration: the target pod gets the same addresses while the source runs", func(t *testing.T) {
		se := se.with(t)
		dst := se.launcher(vmi, "fghij", "node-2")
		out := se.add(cniCall{node: n2, pod: dst})
		if got := out.addrs(); !slices.Equal(got, want) {
			t.Fatalf("target pod got %v, want the VM's %v", got, want)
		}
		for _, a := range want {
			if c := se.claimFor(a); c == nil || c.Spec.Holder.Pod != dst.Name || c.Spec.Holder.Node != "node-2" {
				t.Errorf("claim of %s: %+v; want it held by the target pod on node-2", a, c)
			}
		}
		// Migration done: the source pod's sandbox goes (DEL), then the pod.
		se.del(cniCall{node: n1, pod: src})
		se.deleteNow(src)
		for _, a := range want {
			if c := se.claimFor(a); c == nil || c.Spec.Holder.Pod != dst.Name {
				t.Errorf("after the source pod's DEL, claim of %s: %+v; want it kept by the target pod", a, c)
			}
		}
		src = dst
	})

	t.Run("restart: a new VMI and virt-launcher pod get the same addresses", func(t *testing.T) {
		se := se.with(t)
		se.del(cniCall{node: n2, pod: src})
		se.deleteNow(src, vmi)
		if c := se.claimFor(want[0]); c == nil {
			t.Fatalf("the VM's address %s was freed at its pod's DEL", want[0])
		}
		vmi = se.kubevirtObj("VirtualMachineInstance", "vms", "vm1", vm)
		p := se.launcher(vmi, "klmno", "node-1")
		out := se.add(cniCall{node: n1, pod: p})
		if got := out.addrs(); !slices.Equal(got, want) {
			t.Fatalf("restarted VM's pod got %v, want %v", got, want)
		}
		src = p
	})

	t.Run("other pods get other addresses", func(t *testing.T) {
		se := se.with(t)
		p := se.pod("vms", "plain", "node-1", nil, nil)
		out := se.add(cniCall{node: n1, pod: p})
		for _, a := range out.addrs() {
			if slices.Contains(want, a) {
				t.Errorf("plain pod got the VM's address %s", a)
			}
		}
	})

	t.Run("VM deleted: its addresses and endpoint are freed; a VM without pods keeps them", func(t *testing.T) {
		se := se.with(t)
		// vm2 stopped (no VMI, no pod) but still defined; vm1 deleted, and a plain pod deleted
		// at the same moment: once the plain pod's addresses are freed, the collector has
		// judged vm2's too.
		vm2 := se.kubevirtObj("VirtualMachine", "vms", "vm2", nil)
		vmi2 := se.kubevirtObj("VirtualMachineInstance", "vms", "vm2", vm2)
		p2 := se.launcher(vmi2, "pqrst", "node-2")
		vm2Addrs := se.add(cniCall{node: n2, pod: p2}).addrs()
		se.del(cniCall{node: n2, pod: p2})
		se.deleteNow(p2, vmi2)

		se.del(cniCall{node: n1, pod: src})
		se.deleteNow(src, vmi, vm)
		control := se.pod("vms", "control", "node-2", nil, nil)
		controlAddrs := se.add(cniCall{node: n2, pod: control}).addrs()
		se.deleteNow(control) // no DEL: only the collector frees it
		eventually(t, "the deleted VM's and the deleted pod's addresses freed", 30*time.Second, func() (bool, string) {
			for _, a := range append(slices.Clone(want), controlAddrs...) {
				if c := se.claimFor(a); c != nil {
					return false, fmt.Sprintf("%s still held by %+v", a, c.Spec.Holder)
				}
			}
			return se.endpoint("vms", "vm1") == nil, "AllotEndpoint vms/vm1 still there"
		})
		for _, a := range vm2Addrs {
			if c := se.claimFor(a); c == nil || c.Spec.Holder.VirtualMachine != "vm2" {
				t.Errorf("stopped VM vm2's address %s: %+v; want it kept", a, c)
			}
		}
		if se.endpoint("vms", "vm2") == nil {
			t.Error("stopped VM vm2's endpoint was deleted")
		}
	})

	t.Run("kubevirtStaticIP false: a VM's pods are ordinary pods", func(t *testing.T) {
		se := se.with(t)
		cfg := sharedConfig(t, "node-3", se.kc)
		cfg.Cluster.SharedPools.KubevirtStaticIP = ptr.To(false)
		n3 := &node{t: t, name: "node-3", cfg: cfg}
		n3.start()
		t.Cleanup(n3.stop)
		eventually(t, "node-3: shared pools synced", 20*time.Second, func() (bool, string) {
			return n3.d.Agent().Shared().Synced(), "not synced"
		})
		vm3 := se.kubevirtObj("VirtualMachine", "vms", "vm3", nil)
		vmi3 := se.kubevirtObj("VirtualMachineInstance", "vms", "vm3", vm3)
		a := se.launcher(vmi3, "aaaaa", "node-3")
		b := se.launcher(vmi3, "bbbbb", "node-3")
		outA, outB := se.add(cniCall{node: n3, pod: a}), se.add(cniCall{node: n3, pod: b})
		for _, x := range outA.addrs() {
			if slices.Contains(outB.addrs(), x) {
				t.Errorf("two pods of vm3 share %s with KubeVirt support off", x)
			}
			if c := se.claimFor(x); c == nil || c.Spec.Holder.VirtualMachine != "" {
				t.Errorf("claim of %s: %+v; want no virtualMachine", x, c)
			}
		}
		if se.endpoint("vms", "vm3") != nil {
			t.Error("an endpoint named after vm3 exists with KubeVirt support off")
		}
	})
}
