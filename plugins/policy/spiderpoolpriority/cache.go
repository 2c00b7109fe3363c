package spiderpoolpriority

import "sync"

// parseCache memoizes annotation parsing. Replicas of one workload carry identical
// annotations, and decoding JSON costs several times more than the rest of a decision. The
// cached values are never mutated after parsing, so sharing them between calls is safe and
// the policy stays a pure function of its input.
type parseCache struct {
	mu sync.RWMutex
	m  map[cacheKey]parsed
}

type annoKind uint8

const (
	kSubnets annoKind = iota
	kSubnet
	kIPPools
	kIPPool
	kNSDefault
)

type cacheKey struct {
	kind annoKind
	val  string
}

type parsed struct {
	sels  []Selection // ippools, subnets
	sel   Selection   // ippool, subnet
	names []string    // namespace defaults
	err   error
}

const (
	maxCacheEntries = 1024
	// Larger values are parsed every time rather than pinned in memory.
	maxCachedValueLen = 4096
)

func (c *parseCache) get(kind annoKind, val string) parsed {
	if c == nil || len(val) > maxCachedValueLen {
		return parse(kind, val)
	}
	k := cacheKey{kind, val}
	c.mu.RLock()
	p, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return p
	}
	p = parse(kind, val)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCacheEntries {
		// Dropping everything is crude but bounded and cheap; hot values come back at once.
		c.m = make(map[cacheKey]parsed, 64)
	}
	c.m[k] = p
	c.mu.Unlock()
	return p
}

func parse(kind annoKind, val string) parsed {
	var p parsed
	switch kind {
	case kSubnets:
		p.sels, p.err = ParseSubnetsAnnotation(val)
	case kSubnet:
		p.sel, p.err = ParseSubnetAnnotation(val)
	case kIPPools:
		p.sels, p.err = ParseIPPoolsAnnotation(val)
	case kIPPool:
		p.sel, p.err = ParseIPPoolAnnotation(val)
	case kNSDefault:
		p.names, p.err = ParseNamespaceDefaultPools(val)
	}
	return p
}
