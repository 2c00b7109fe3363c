package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/allot-ipam/allot/core/api"
)

// cniTimeout is the ipam timeout of the soak's network configuration: what a runtime waits
// for allot-cni (the default is 30 s; shorter here so a hung call shows within a short soak).
const cniTimeout = 20 * time.Second

// network is a CNI network served by one allotd socket.
type network struct {
	name   string
	socket string
}

// netconf is the network configuration a runtime gives the IPAM plugin (ipam only: the
// soak has no interfaces to configure).
func (n network) netconf(extra string) []byte {
	return fmt.Appendf(nil, `{"cniVersion":"1.1.0","name":%q,"ipam":{"type":"allot-cni","socket":%q,"timeout":%q}%s}`,
		n.name, n.socket, cniTimeout.String(), extra)
}

// cniCall is one exec of allot-cni.
type cniCall struct {
	cmd         string // ADD, DEL, GC
	containerID string
	// args is CNI_ARGS (the pod, as the kubelet passes it).
	args string
	// valid lists the live containers for GC (cni.dev/valid-attachments).
	valid []string
}

// cniOut is allot-cni's answer: addresses (ADD), or the CNI error it printed.
type cniOut struct {
	addrs []string // without prefix length, sorted
	err   *types.Error
	took  time.Duration
}

// exec runs allot-cni as a runtime does. A failure without a CNI error on stdout (a crash,
// garbage) is returned as an error: the soak fails on it.
func (n network) exec(ctx context.Context, c cniCall) (cniOut, error) {
	extra := ""
	if c.cmd == "GC" {
		atts := make([]map[string]string, 0, len(c.valid))
		for _, id := range c.valid {
			atts = append(atts, map[string]string{"containerID": id, "ifname": "eth0"})
		}
		b, err := json.Marshal(atts)
		if err != nil {
			return cniOut{}, err
		}
		extra = `,"cni.dev/valid-attachments":` + string(b)
	}
	cmd := exec.CommandContext(ctx, env.allotCNI)
	cmd.Env = []string{
		"CNI_COMMAND=" + c.cmd, "CNI_CONTAINERID=" + c.containerID, "CNI_NETNS=/var/run/netns/allot-soak-" + c.containerID,
		"CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin", "CNI_ARGS=" + c.args,
	}
	cmd.Stdin = bytes.NewReader(n.netconf(extra))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	begin := time.Now()
	runErr := cmd.Run()
	out := cniOut{took: time.Since(begin)}
	var exitErr *exec.ExitError
	switch {
	case runErr == nil:
		if c.cmd == "ADD" {
			r, err := current.NewResult(stdout.Bytes())
			if err != nil {
				return out, fmt.Errorf("allot-cni ADD printed no result: %v: %s", err, stdout.String())
			}
			for _, ip := range r.(*current.Result).IPs {
				out.addrs = append(out.addrs, ip.Address.IP.String())
			}
			slices.Sort(out.addrs)
		}
	case errors.As(runErr, &exitErr) && ctx.Err() == nil:
		var e types.Error
		if err := json.Unmarshal(stdout.Bytes(), &e); err != nil || e.Msg == "" {
			return out, fmt.Errorf("allot-cni %s failed without a CNI error on stdout: %v\nstdout: %s\nstderr: %s", c.cmd, runErr, stdout.String(), stderr.String())
		}
		out.err = &e
	default:
		return out, fmt.Errorf("allot-cni %s: %w", c.cmd, runErr)
	}
	return out, nil
}

// failureKind names why an ADD or DEL failed, for the figures. Only "error N" kinds are
// unexpected: the others are what a runtime sees while a daemon is killed and restarted.
func failureKind(e *types.Error) string {
	switch {
	case e.Code == types.ErrTryAgainLater && strings.Contains(e.Msg, "is not reachable"):
		return "unreachable"
	case e.Code == types.ErrTryAgainLater && strings.Contains(e.Msg, "did not answer within"):
		return "timeout"
	case e.Code == types.ErrTryAgainLater && api.IsBusy(errors.New(e.Msg)):
		return "busy"
	case e.Code == types.ErrTryAgainLater && strings.HasPrefix(e.Msg, "allotd cannot serve now"):
		return "unavailable"
	case e.Code == types.ErrTryAgainLater:
		return "cut off"
	case e.Code == 101:
		return "exhausted"
	}
	return fmt.Sprintf("error %d", e.Code)
}

// expectedFailure: kinds a killed or restarting daemon explains.
func expectedFailure(kind string) bool { return !strings.HasPrefix(kind, "error ") }

// bare is an address without its prefix length.
func bare(cidr string) string {
	if p, err := netip.ParsePrefix(cidr); err == nil {
		return p.Addr().String()
	}
	return cidr
}
