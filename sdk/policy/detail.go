package policy

import "context"

type detailKey struct{}

// WithDetail marks ctx as asking for PodDecision.Rejected: the host sets it only when someone
// will read the answer (allotctl explain), so that a policy can leave the per-pool reasons,
// which cost a string per pool, out of the decisions nobody reads. Process and WebAssembly
// plugins do not see it (a context does not cross the transport) and fill Rejected or not as
// they like.
func WithDetail(ctx context.Context) context.Context {
	return context.WithValue(ctx, detailKey{}, true)
}

// DetailWanted reports whether ctx asks for PodDecision.Rejected (WithDetail).
func DetailWanted(ctx context.Context) bool {
	v, _ := ctx.Value(detailKey{}).(bool)
	return v
}

// Names reports whether the decision names pool as a candidate of family fam.
func (d *PodDecision) Names(pool string, fam Family) bool {
	cs := d.IPv4
	if fam == IPv6 {
		cs = d.IPv6
	}
	for _, c := range cs {
		if c.Pool == pool {
			return true
		}
	}
	return false
}
