package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/config"
	"github.com/allot-ipam/allot/core/pluginhost"
	"github.com/allot-ipam/allot/core/policychain"
	"github.com/allot-ipam/allot/core/registry"
	"github.com/allot-ipam/allot/sdk/policy"
)

// Plugins holds the loaded plugins and the pool policy chain of every CNI network.
type Plugins struct {
	log      *slog.Logger
	loaded   []*pluginhost.Loaded
	def      *policychain.Chain
	networks map[string]*policychain.Chain
	// builtins are the built-in policies some chain uses, sorted, for Status.
	builtins []string

	mu      sync.Mutex
	lastErr map[string]string
}

// LoadPlugins loads every configured plugin and builds the policy chains. A chain may name
// a loaded pool-policy plugin or a built-in policy; a loaded plugin wins over a built-in of
// the same name, so a site can replace a built-in without renaming it in every chain.
// Built-ins are those of builtins (the composition root's registry).
func LoadPlugins(ctx context.Context, cfg *config.Config, builtins *registry.Registry, log *slog.Logger) (_ *Plugins, err error) {
	p := &Plugins{log: log, networks: map[string]*policychain.Chain{}, lastErr: map[string]string{}}
	defer func() {
		if err != nil {
			_ = p.Close(context.WithoutCancel(ctx))
		}
	}()
	for i, pc := range cfg.Plugins {
		l, err := pluginhost.Open(ctx, pc, log)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d]: %w", i, err)
		}
		p.loaded = append(p.loaded, l)
		log.Info("plugin loaded", "name", pc.Name, "kind", pc.Kind, "transport", pc.Transport)
	}

	b := &chainBuilder{p: p, cfg: cfg, builtins: builtins, log: log, instances: map[string]policy.PoolPolicy{}, used: map[string]bool{}}
	if p.def, err = b.build("policy.default", cfg.Policy.Default); err != nil {
		return nil, err
	}
	nets := make([]string, 0, len(cfg.Policy.Networks))
	for n := range cfg.Policy.Networks {
		nets = append(nets, n)
	}
	sort.Strings(nets)
	for _, n := range nets {
		if p.networks[n], err = b.build("policy.networks."+n, cfg.Policy.Networks[n]); err != nil {
			return nil, err
		}
	}
	for n := range cfg.Policy.Config {
		if _, ok := registry.Lookup(builtins.Policies, n); !ok {
			return nil, fmt.Errorf("policy.config.%s: no built-in policy has this name (built-in: %s)", n, registry.Names(builtins.Policies))
		}
	}
	for n := range b.used {
		p.builtins = append(p.builtins, n)
	}
	sort.Strings(p.builtins)
	return p, nil
}

// chainBuilder builds the policy chains of the configuration: one instance per policy
// name, shared by every chain naming it.
type chainBuilder struct {
	p         *Plugins
	cfg       *config.Config
	builtins  *registry.Registry
	log       *slog.Logger
	instances map[string]policy.PoolPolicy
	used      map[string]bool // built-in policies instantiated
}

// resolve finds policy name (of field): a pool-policy plugin loaded, else a built-in.
func (b *chainBuilder) resolve(field, name string) (policychain.Link, error) {
	if pol, ok := b.instances[name]; ok {
		return policychain.Link{Name: name, Policy: pol, Inline: b.used[name]}, nil
	}
	for _, l := range b.p.loaded {
		if l.Name == name {
			if l.PoolPolicy == nil {
				return policychain.Link{}, fmt.Errorf("%s: plugin %q is a %s, not a pool-policy", field, name, l.Kind)
			}
			b.instances[name] = l.PoolPolicy
			return policychain.Link{Name: name, Policy: l.PoolPolicy}, nil
		}
	}
	if _, ok := registry.Lookup(b.builtins.Policies, name); !ok {
		return policychain.Link{}, fmt.Errorf("%s: unknown policy %q (built-in: %s; plugins: %s)", field, name, registry.Names(b.builtins.Policies), b.p.pluginNames())
	}
	pol, err := b.builtins.NewPolicy(name, b.cfg.Policy.Config[name])
	if err != nil {
		return policychain.Link{}, fmt.Errorf("policy.config.%s: %w", name, err)
	}
	b.instances[name] = pol
	b.used[name] = true // built-in
	return policychain.Link{Name: name, Policy: pol, Inline: true}, nil
}

// build makes the chain ch of field.
func (b *chainBuilder) build(field string, ch config.Chain) (*policychain.Chain, error) {
	pc := policychain.Config{Timeout: b.cfg.Policy.Timeout, Logger: b.log, OnError: b.p.recordError}
	for i, name := range ch.Policies {
		l, err := b.resolve(fmt.Sprintf("%s.chain[%d]", field, i), name)
		if err != nil {
			return nil, err
		}
		pc.Policies = append(pc.Policies, l)
	}
	if ch.Fallback != "" {
		l, err := b.resolve(field+".fallback", ch.Fallback)
		if err != nil {
			return nil, err
		}
		pc.Fallback = &l
	}
	c, err := policychain.New(pc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return c, nil
}

// Loaded returns the loaded plugin called name, or nil.
func (p *Plugins) Loaded(name string) *pluginhost.Loaded {
	for _, l := range p.loaded {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// PolicyFor returns the chain that decides for a CNI network.
func (p *Plugins) PolicyFor(network string) policy.PoolPolicy {
	if c, ok := p.networks[network]; ok {
		return c
	}
	return p.def
}

func (p *Plugins) recordError(name string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr[name] = err.Error()
}

// Status lists built-in policies in use, then loaded plugins, for allotctl plugins.
func (p *Plugins) Status(context.Context) []api.PluginStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]api.PluginStatus, 0, len(p.builtins)+len(p.loaded))
	for _, n := range p.builtins {
		out = append(out, api.PluginStatus{
			Name: n, Kind: pluginhost.KindPoolPolicy, Transport: "builtin",
			Version: Version, Contract: policy.ContractVersion, Healthy: true, LastError: p.lastErr[n],
		})
	}
	for _, l := range p.loaded {
		st := l.Status()
		if st.LastError == "" {
			st.LastError = p.lastErr[l.Name]
		}
		out = append(out, st)
	}
	return out
}

// Close stops every loaded plugin.
func (p *Plugins) Close(ctx context.Context) error {
	var errs []error
	for _, l := range p.loaded {
		if err := l.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("plugin %q: %w", l.Name, err))
		}
	}
	p.loaded = nil
	return errors.Join(errs...)
}

func (p *Plugins) pluginNames() string {
	if len(p.loaded) == 0 {
		return "none loaded"
	}
	var names []string
	for _, l := range p.loaded {
		names = append(names, l.Name)
	}
	return strings.Join(names, ", ")
}
