// Package iptables is the datapath that masquerades pod traffic with
// iptables/ip6tables rules in a chain of allot's own, jumped to from
// nat POSTROUTING, driven through github.com/coreos/go-iptables.
//
// The chain is named after a hash of its rules (ALLOT-MASQ-<8 hex>). A
// reload builds the new chain completely, inserts the jump to it at the
// head of POSTROUTING, and only then deletes the old jump and chain, so
// there is no moment at which pod traffic is not masqueraded. NAT bindings
// live in the kernel's conntrack, so established flows keep theirs across
// a reload.
package iptables

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/allot-ipam/allot/plugins/datapath/internal/netinfo"
	"github.com/allot-ipam/allot/sdk/datapath"
	goipt "github.com/coreos/go-iptables/iptables"
)

// Name is the datapath's name in configuration.
const Name = "iptables"

const (
	table       = "nat"
	hookChain   = "POSTROUTING"
	chainPrefix = "ALLOT-MASQ-"
	// comment marks allot's jump; no spaces so iptables -S output splits
	// back into the same arguments.
	comment = "allot-masquerade"
)

// Datapath is the iptables masquerade datapath.
type Datapath struct {
	log *slog.Logger

	mu      sync.Mutex
	chains  map[goipt.Protocol]string // current chain per family
	ifaces  []string
	lastErr string
	random  bool
}

var _ datapath.Datapath = (*Datapath)(nil)

// New returns the iptables datapath. A nil logger discards.
func New(logger *slog.Logger) *Datapath {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Datapath{log: logger.With("datapath", Name), chains: map[goipt.Protocol]string{}}
}

func familyName(p goipt.Protocol) string {
	if p == goipt.ProtocolIPv6 {
		return "ipv6"
	}
	return "ipv4"
}

func newIPT(p goipt.Protocol) (*goipt.IPTables, error) {
	var ipt *goipt.IPTables
	var err error
	if cmd := commandFor(p); cmd != "" {
		ipt, err = goipt.New(goipt.IPFamily(p), goipt.Timeout(10), goipt.Path(cmd))
	} else {
		ipt, err = goipt.New(goipt.IPFamily(p), goipt.Timeout(10))
	}
	if err != nil {
		return nil, fmt.Errorf("iptables: %s: %w", familyName(p), err)
	}
	return ipt, nil
}

// Apply installs or reloads the masquerade rules for cfg.
func (d *Datapath) Apply(ctx context.Context, cfg datapath.Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("iptables: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.apply(ctx, cfg)
	d.setErr(err)
	return err
}

func (d *Datapath) setErr(err error) {
	if err != nil {
		d.lastErr = err.Error()
	} else {
		d.lastErr = ""
	}
}

func (d *Datapath) apply(ctx context.Context, cfg datapath.Config) error {
	pod4, pod6 := datapath.SplitFamilies(datapath.NormalizePrefixes(cfg.PodCIDRs))
	non4, non6 := datapath.SplitFamilies(cfg.EffectiveNonMasquerade())

	// Interfaces are resolved only when a rule needs an address per
	// interface (masquerade to route source); otherwise the patterns go
	// straight into -o, which also covers interfaces created later.
	egress, rerr := netinfo.Resolve(cfg)
	if rerr != nil {
		if cfg.MasqueradeToRouteSource {
			return fmt.Errorf("iptables: %w", rerr)
		}
		d.log.WarnContext(ctx, "iptables: egress interfaces not resolved (rules use the patterns)", "err", rerr)
	}

	var errs []error
	for _, fam := range []struct {
		proto   goipt.Protocol
		pods    []netip.Prefix
		nonMasq []netip.Prefix
		addrOf  func(netinfo.Egress) netip.Addr
	}{
		{goipt.ProtocolIPv4, pod4, non4, func(e netinfo.Egress) netip.Addr { return e.V4 }},
		{goipt.ProtocolIPv6, pod6, non6, func(e netinfo.Egress) netip.Addr { return e.V6 }},
	} {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(fam.pods) == 0 {
			// Nothing to masquerade in this family: make sure nothing of
			// ours is left, from an earlier config or an earlier process
			// (an agent restarted after the node lost its last block of
			// the family must not keep masquerading the old block).
			if err := removeFamily(fam.proto); err != nil {
				errs = append(errs, err)
			}
			delete(d.chains, fam.proto)
			continue
		}
		ipt, err := newIPT(fam.proto)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		random := cfg.RandomFully && ipt.HasRandomFully()
		if cfg.RandomFully && !random {
			d.log.WarnContext(ctx, "iptables: --random-fully not supported, ignored", "family", familyName(fam.proto))
		}
		rules := buildRules(cfg, fam.pods, fam.nonMasq, egress, fam.addrOf, random)
		chain := chainName(rules)
		if err := install(ipt, chain, rules); err != nil {
			errs = append(errs, fmt.Errorf("iptables: %s: %w", familyName(fam.proto), err))
			continue
		}
		d.chains[fam.proto] = chain
		d.random = random
		d.log.InfoContext(ctx, "iptables: masquerade chain in place", "family", familyName(fam.proto), "chain", chain, "rules", len(rules))
	}
	d.ifaces = d.ifaces[:0]
	for _, e := range egress {
		d.ifaces = append(d.ifaces, e.Name)
	}
	return errors.Join(errs...)
}

// buildRules returns the rule specs of the masquerade chain, in order:
// RETURN for loopback and pod interfaces (when no egress list is set),
// RETURN for every non-masquerade destination, then MASQUERADE (or SNAT to
// the route's source) for pod-sourced traffic out of each egress pattern.
func buildRules(cfg datapath.Config, pods, nonMasq []netip.Prefix, egress []netinfo.Egress,
	addrOf func(netinfo.Egress) netip.Addr, random bool) [][]string {
	var rules [][]string
	if len(cfg.EgressInterfaces) == 0 {
		rules = append(rules, []string{"-o", "lo", "-j", "RETURN"})
		for _, p := range cfg.EffectivePodInterfaces() {
			rules = append(rules, []string{"-o", p, "-j", "RETURN"})
		}
	}
	for _, p := range nonMasq {
		rules = append(rules, []string{"-d", p.String(), "-j", "RETURN"})
	}
	masq := []string{"-j", "MASQUERADE"}
	if random {
		masq = append(masq, "--random-fully")
	}
	for _, pod := range pods {
		if cfg.MasqueradeToRouteSource {
			for _, e := range egress {
				a := addrOf(e)
				if !a.IsValid() {
					rules = append(rules, slices.Concat([]string{"-s", pod.String(), "-o", e.Name}, masq))
					continue
				}
				snat := []string{"-j", "SNAT", "--to-source", a.String()}
				if random {
					snat = append(snat, "--random-fully")
				}
				rules = append(rules, slices.Concat([]string{"-s", pod.String(), "-o", e.Name}, snat))
			}
			continue
		}
		if len(cfg.EgressInterfaces) == 0 {
			rules = append(rules, slices.Concat([]string{"-s", pod.String()}, masq))
			continue
		}
		for _, o := range slices.Sorted(slices.Values(cfg.EgressInterfaces)) {
			rules = append(rules, slices.Concat([]string{"-s", pod.String(), "-o", o}, masq))
		}
	}
	return rules
}

// chainName derives the chain name from the rules, so an unchanged config
// maps to the chain already in place and Apply is a no-op.
func chainName(rules [][]string) string {
	h := sha256.New()
	for _, r := range rules {
		h.Write([]byte(strings.Join(r, " ")))
		h.Write([]byte{'\n'})
	}
	return chainPrefix + strings.ToUpper(hex.EncodeToString(h.Sum(nil))[:8])
}

func jumpSpec(chain string) []string {
	return []string{"-m", "comment", "--comment", comment, "-j", chain}
}

// install makes chain hold exactly rules and be the (only) allot jump in
// POSTROUTING, building before switching.
func install(ipt *goipt.IPTables, chain string, rules [][]string) error {
	chains, err := ipt.ListChains(table)
	if err != nil {
		return fmt.Errorf("list chains: %w", err)
	}
	exists := slices.Contains(chains, chain)
	current := false
	if exists {
		// Same name means same rules, unless someone edited the chain.
		got, err := ipt.List(table, chain)
		if err != nil {
			return fmt.Errorf("list %s: %w", chain, err)
		}
		current = len(got) == len(rules)+1 // "-N chain" + rules
	}
	if !current {
		if err := ipt.ClearChain(table, chain); err != nil {
			return fmt.Errorf("create %s: %w", chain, err)
		}
		for _, r := range rules {
			if err := ipt.Append(table, chain, r...); err != nil {
				return fmt.Errorf("append to %s %v: %w", chain, r, err)
			}
		}
	}
	ok, err := ipt.Exists(table, hookChain, jumpSpec(chain)...)
	if err != nil {
		return fmt.Errorf("check jump to %s: %w", chain, err)
	}
	if !ok {
		if err := ipt.Insert(table, hookChain, 1, jumpSpec(chain)...); err != nil {
			return fmt.Errorf("insert jump to %s: %w", chain, err)
		}
	}
	// Old jumps and chains go only now that the new chain is live.
	return cleanup(ipt, chain, chains)
}

// cleanup deletes every allot jump and chain except keep ("" = all).
func cleanup(ipt *goipt.IPTables, keep string, chains []string) error {
	specs, err := ipt.List(table, hookChain)
	if err != nil {
		return fmt.Errorf("list %s: %w", hookChain, err)
	}
	var errs []error
	for _, s := range specs {
		f := strings.Fields(s)
		if len(f) < 3 || f[0] != "-A" {
			continue
		}
		args := f[2:]
		i := slices.Index(args, "-j")
		if i < 0 || i+1 >= len(args) || !strings.HasPrefix(args[i+1], chainPrefix) || args[i+1] == keep {
			continue
		}
		if err := ipt.Delete(table, hookChain, args...); err != nil {
			errs = append(errs, fmt.Errorf("delete jump %v: %w", args, err))
		}
	}
	for _, c := range chains {
		if strings.HasPrefix(c, chainPrefix) && c != keep {
			if err := ipt.ClearAndDeleteChain(table, c); err != nil {
				errs = append(errs, fmt.Errorf("delete chain %s: %w", c, err))
			}
		}
	}
	return errors.Join(errs...)
}

func removeFamily(p goipt.Protocol) error {
	ipt, err := newIPT(p)
	if err != nil {
		// No ip6tables binary (or no kernel support): nothing of ours can
		// be there.
		return nil
	}
	chains, err := ipt.ListChains(table)
	if err != nil {
		// No nat table in this family: nothing to remove.
		return nil
	}
	if err := cleanup(ipt, "", chains); err != nil {
		return fmt.Errorf("iptables: %s: %w", familyName(p), err)
	}
	return nil
}

// Remove deletes allot's jumps and chains in both families, including
// leftovers of an earlier process. Idempotent.
func (d *Datapath) Remove(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := errors.Join(removeFamily(goipt.ProtocolIPv4), removeFamily(goipt.ProtocolIPv6))
	if err == nil {
		clear(d.chains)
		d.ifaces = nil
	}
	d.setErr(err)
	return err
}

// Status reports the chains in place, read back from the kernel.
func (d *Datapath) Status(ctx context.Context) (datapath.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := datapath.Status{Name: Name, Detail: map[string]string{}, LastError: d.lastErr}
	active := len(d.chains) > 0
	for _, p := range []goipt.Protocol{goipt.ProtocolIPv4, goipt.ProtocolIPv6} {
		chain, ok := d.chains[p]
		if !ok {
			continue
		}
		ipt, err := newIPT(p)
		if err != nil {
			return st, err
		}
		live, err := ipt.Exists(table, hookChain, jumpSpec(chain)...)
		if err != nil {
			return st, fmt.Errorf("iptables: %s: %w", familyName(p), err)
		}
		rules, _ := ipt.List(table, chain)
		st.Detail[familyName(p)+"_chain"] = chain
		st.Detail[familyName(p)+"_rules"] = fmt.Sprint(max(len(rules)-1, 0))
		active = active && live
	}
	st.Active = active
	st.Interfaces = slices.Clone(d.ifaces)
	st.Detail["random_fully"] = fmt.Sprint(d.random)
	return st, nil
}
