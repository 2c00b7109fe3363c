package allocator

import "net/netip"

// PeekNext returns the address AllocateNext would hand out now, changing nothing (not even
// the next-fit cursor): a dry run (allotctl explain --dry-run) names the very address the next
// ADD would get.
func (p *Pool) PeekNext() (netip.Addr, error) {
	si, off, _, err := p.nextFree()
	if err != nil {
		return netip.Addr{}, err
	}
	return p.spans[si].base.Add64(off).Addr(p.is4), nil
}

// CanAllocate says whether Allocate(a) would succeed now, with the error it would return,
// changing nothing.
func (p *Pool) CanAllocate(a netip.Addr) error {
	_, _, _, err := p.takeable(a)
	return err
}
