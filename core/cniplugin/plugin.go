package cniplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/allot-ipam/allot/core/api"
)

// Allot-specific CNI error codes (100 and up are for plugins to define).
const (
	ErrExhausted     uint = 101
	ErrConflict      uint = 102
	ErrNoPool        uint = 103
	ErrCheckMismatch uint = 104
	// ErrPermissionDenied: allotd refused the caller (not root, not in socketGroup).
	ErrPermissionDenied uint = 105
)

// Daemon is the part of allotd's API the plugin calls. NewDaemon's implementation is used
// by default; core/api/client.Client and any api.Service also fit.
type Daemon interface {
	Allocate(ctx context.Context, req *api.AllocateRequest) (*api.Allocation, error)
	Release(ctx context.Context, req *api.ReleaseRequest) error
	Check(ctx context.Context, req *api.CheckRequest) (*api.Allocation, error)
	GC(ctx context.Context, req *api.GCRequest) (*api.GCResponse, error)
	Status(ctx context.Context) (*api.Status, error)
}

// Plugin holds the CNI command functions. The zero value is ready: it dials the socket of
// the ipam config and prints results on os.Stdout.
type Plugin struct {
	// Dial returns the daemon for a socket path; nil uses NewDaemon.
	Dial func(socket string) Daemon
	// Stdout receives the result of ADD; nil is os.Stdout.
	Stdout io.Writer
}

// About is printed by Main when the binary runs without CNI_COMMAND.
func About(v string) string { return "CNI IPAM plugin allot-cni " + v + " (asks allotd for addresses)" }

// call is what every command needs: its config, its daemon and its ctx.
type call struct {
	conf   *Config
	daemon Daemon
	ctx    context.Context
	cancel context.CancelFunc
}

func (p *Plugin) begin(args *CmdArgs) (*call, error) {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return nil, err
	}
	if p.Dial == nil {
		// The connection's deadline is ipam.timeout (newTimedDaemon): a ctx deadline
		// would only add a second timer and a context to cancel.
		return &call{conf: conf, daemon: newTimedDaemon(conf.Socket, conf.Timeout), ctx: context.Background(), cancel: func() {}}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), conf.Timeout)
	return &call{conf: conf, daemon: p.Dial(conf.Socket), ctx: ctx, cancel: cancel}, nil
}

// Add allocates addresses for (CNI_CONTAINERID, CNI_IFNAME) and prints the result.
func (p *Plugin) Add(args *CmdArgs) error {
	c, err := p.begin(args)
	if err != nil {
		return err
	}
	defer c.cancel()
	cargs, err := ParseArgs(args.Args)
	if err != nil {
		return err
	}
	c.conf.MergeIPs(cargs.IPs)
	req := &api.AllocateRequest{
		Owner:            api.Owner{ContainerID: args.ContainerID, IfName: args.IfName},
		Network:          c.conf.Network,
		Pod:              cargs.Pod,
		Pools:            c.conf.Pools,
		DefaultIPv4Pools: c.conf.DefaultIPv4Pools,
		DefaultIPv6Pools: c.conf.DefaultIPv6Pools,
	}
	for _, ip := range c.conf.IPs {
		req.IPs = append(req.IPs, ip.Value)
	}
	alloc, err := c.daemon.Allocate(c.ctx, req)
	if err != nil {
		return c.daemonError("ADD", err)
	}
	res, err := resultFrom(alloc)
	if err != nil {
		return err
	}
	b, err := encodeResult(res, c.conf.CNIVersion)
	if err != nil {
		return err
	}
	w := p.Stdout
	if w == nil {
		w = os.Stdout
	}
	if _, err := w.Write(b); err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("write result: %v", err), "")
	}
	return nil
}

// Del frees what the owner holds; an owner that holds nothing is not an error.
func (p *Plugin) Del(args *CmdArgs) error {
	c, err := p.begin(args)
	if err != nil {
		return err
	}
	defer c.cancel()
	// CNI_ARGS is checked on DEL too, so a runtime sending garbage hears about it. The owner
	// decides what is freed; the network and pod tell an agent which allocator holds it
	// (shared pools find the pod's records by the pod).
	cargs, err := ParseArgs(args.Args)
	if err != nil {
		return err
	}
	err = c.daemon.Release(c.ctx, &api.ReleaseRequest{
		Owner:   api.Owner{ContainerID: args.ContainerID, IfName: args.IfName},
		Network: c.conf.Network,
		Pod:     cargs.Pod,
	})
	if err != nil {
		return c.daemonError("DEL", err)
	}
	return nil
}

// Check verifies that allotd still holds, for the owner, exactly the addresses prevResult
// gives it.
func (p *Plugin) Check(args *CmdArgs) error {
	c, err := p.begin(args)
	if err != nil {
		return err
	}
	defer c.cancel()
	cargs, err := ParseArgs(args.Args)
	if err != nil {
		return err
	}
	if c.conf.PrevResult == nil {
		return invalidConfig("prevResult", "missing: CHECK needs the result of ADD")
	}
	prev, terr := prevResultIPs(c.conf.PrevResult)
	if terr != nil {
		return terr
	}
	owner := api.Owner{ContainerID: args.ContainerID, IfName: args.IfName}
	alloc, err := c.daemon.Check(c.ctx, &api.CheckRequest{Owner: owner, Network: c.conf.Network, Pod: cargs.Pod})
	if err != nil {
		return c.daemonError("CHECK", err)
	}
	return compareWithPrev(owner, alloc, prev)
}

// GC frees every allocation of the network whose owner is not a valid attachment.
func (p *Plugin) GC(args *CmdArgs) error {
	c, err := p.begin(args)
	if err != nil {
		return err
	}
	defer c.cancel()
	valid := c.conf.ValidAttachments
	if valid == nil {
		valid = []api.Owner{}
	}
	if _, err := c.daemon.GC(c.ctx, &api.GCRequest{Network: c.conf.Network, Valid: valid}); err != nil {
		return c.daemonError("GC", err)
	}
	return nil
}

// Status succeeds when allotd answers and can serve ADD for this network's pools.
func (p *Plugin) Status(args *CmdArgs) error {
	c, err := p.begin(args)
	if err != nil {
		return err
	}
	defer c.cancel()
	st, err := c.daemon.Status(c.ctx)
	if err != nil {
		return c.daemonError("STATUS", err)
	}
	if !st.Ready {
		msg := "allotd is not ready"
		if st.Message != "" {
			msg += ": " + st.Message
		}
		return types.NewError(types.ErrPluginNotAvailable, msg, "")
	}
	// Pools named by this network must exist and have room; otherwise ADD would fail.
	for i, name := range c.conf.Pools {
		ps := findPool(st.Pools, name)
		switch {
		case ps == nil:
			return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("ipam.pools[%d]: allotd has no pool %q", i, name), "")
		case ps.Free == 0:
			return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("ipam.pools[%d]: pool %q has no free address", i, name), "")
		}
	}
	return nil
}

func findPool(pools []api.PoolStatus, name string) *api.PoolStatus {
	for i := range pools {
		if pools[i].Name == name {
			return &pools[i]
		}
	}
	return nil
}

// daemonError turns a failed daemon call into a CNI error with the code of API.md's table.
func (c *call) daemonError(cmd string, err error) error {
	var ae *api.Error
	if !errors.As(err, &ae) {
		// The daemon did not answer: not listening, died mid-request, or too slow.
		code := types.ErrTryAgainLater
		if cmd == "STATUS" {
			code = types.ErrPluginNotAvailable
		}
		msg := err.Error()
		switch {
		case errors.Is(err, ErrDaemonUnreachable):
			// The message already reads "allotd is not reachable at <socket>: ...".
		case errors.Is(err, context.DeadlineExceeded):
			msg = fmt.Sprintf("allotd at %s did not answer within %s (ipam.timeout)", c.conf.Socket, c.conf.Timeout)
		default:
			msg = fmt.Sprintf("allotd at %s: %v", c.conf.Socket, err)
		}
		return types.NewError(code, msg, "")
	}
	details := fmt.Sprintf("allotd error code %q", ae.Code)
	switch ae.Code {
	case api.CodeExhausted:
		return types.NewError(ErrExhausted, ae.Error(), details)
	case api.CodeConflict:
		return types.NewError(ErrConflict, c.mapField(ae).Error(), details)
	case api.CodeNoPool:
		return types.NewError(ErrNoPool, ae.Error(), details)
	case api.CodeUnavailable:
		return types.NewError(types.ErrTryAgainLater, "allotd cannot serve now: "+ae.Error(), details)
	case api.CodePermissionDenied:
		// The message reads "allotd: permission denied: uid ... is not root ...".
		return types.NewError(ErrPermissionDenied, ae.Error(), details)
	case api.CodeNotFound:
		if cmd == "CHECK" {
			return types.NewError(types.ErrUnknownContainer, ae.Error(), details)
		}
		return types.NewError(types.ErrInvalidNetworkConfig, c.mapField(ae).Error(), details)
	case api.CodeInvalid:
		m := c.mapField(ae)
		code := types.ErrInvalidNetworkConfig
		if strings.HasPrefix(m.Field, "CNI_ARGS") {
			code = types.ErrInvalidEnvironmentVariables
		}
		return types.NewError(code, m.Error(), details)
	}
	return types.NewError(types.ErrInternal, "allotd: "+ae.Error(), details)
}

// mapField renames the daemon's request field (e.g. "ips[1]", "pools[0]", "pod.name") to
// where the user wrote it, so the error points at the config key or CNI_ARGS entry.
func (c *call) mapField(ae *api.Error) *api.Error {
	out := *ae
	f := ae.Field
	var idx int
	var rest string
	switch {
	case f == "":
	case scanIndex(f, "ips", &idx, &rest) && idx < len(c.conf.IPs):
		out.Field = c.conf.IPs[idx].Field + rest
	case scanIndex(f, "pools", &idx, &rest):
		out.Field = fmt.Sprintf("ipam.pools[%d]%s", idx, rest)
	case scanIndex(f, "defaultIPv4Pools", &idx, &rest):
		out.Field = fmt.Sprintf("ipam.default_ipv4_ippool[%d]%s", idx, rest)
	case scanIndex(f, "defaultIPv6Pools", &idx, &rest):
		out.Field = fmt.Sprintf("ipam.default_ipv6_ippool[%d]%s", idx, rest)
	case f == "pod.namespace":
		out.Field = "CNI_ARGS K8S_POD_NAMESPACE"
	case f == "pod.name":
		out.Field = "CNI_ARGS K8S_POD_NAME"
	case f == "pod.uid":
		out.Field = "CNI_ARGS K8S_POD_UID"
	case f == "owner.containerID":
		out.Field = "CNI_CONTAINERID"
	case f == "owner.ifName":
		out.Field = "CNI_IFNAME"
	case f == "network":
		out.Field = "name"
	}
	if out.Field == "" && ae.Code == api.CodeConflict {
		// A conflict without a field: name the requested addresses so the user sees which.
		for _, ip := range c.conf.IPs {
			if strings.Contains(ae.Message, ip.Addr.String()) {
				out.Field = ip.Field
				break
			}
		}
	}
	return &out
}

// scanIndex matches "name[N]rest".
func scanIndex(f, name string, idx *int, rest *string) bool {
	s, ok := strings.CutPrefix(f, name+"[")
	if !ok {
		return false
	}
	num, after, ok := strings.Cut(s, "]")
	if !ok || num == "" {
		return false
	}
	n := 0
	for _, r := range num {
		if r < '0' || r > '9' || n > 1<<20 {
			return false
		}
		n = n*10 + int(r-'0')
	}
	*idx, *rest = n, after
	return true
}

// compareWithPrev checks that the allocation and prevResult agree. prevResult may carry
// addresses from other plugins of the chain; those outside every subnet this owner holds
// an address in are not ours to judge.
func compareWithPrev(owner api.Owner, alloc *api.Allocation, prev []netip.Prefix) error {
	held := make([]netip.Prefix, 0, len(alloc.IPs))
	for i, ip := range alloc.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			return types.NewError(types.ErrInternal, fmt.Sprintf("allotd answered a bad address in ips[%d]: %q", i, ip.Address), "")
		}
		held = append(held, p)
	}
	for _, h := range held {
		found := false
		for _, p := range prev {
			if p.Addr().Unmap() == h.Addr().Unmap() {
				found = true
				if p.Bits() != h.Bits() {
					return types.NewError(ErrCheckMismatch, fmt.Sprintf("address %s: prevResult has prefix length /%d, allotd holds %s for %s", h.Addr(), p.Bits(), h, owner), "")
				}
			}
		}
		if !found {
			return types.NewError(ErrCheckMismatch, fmt.Sprintf("address %s: allotd holds it for %s but prevResult does not list it", h, owner), "")
		}
	}
	for _, p := range prev {
		a := p.Addr().Unmap()
		ours, exact := false, false
		for _, h := range held {
			if h.Masked().Contains(a) {
				ours = true
			}
			if h.Addr().Unmap() == a {
				exact = true
			}
		}
		if ours && !exact {
			return types.NewError(ErrCheckMismatch, fmt.Sprintf("address %s: prevResult lists it but allotd does not hold it for %s", p, owner), "")
		}
	}
	return nil
}
