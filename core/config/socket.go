package config

import (
	"errors"
	"fmt"
	"os/user"
	"regexp"
	"strconv"
)

// groupName is what useradd and systemd accept as a group name (a trailing $ is Samba's
// machine accounts).
var groupName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$`)

// validateSocketGroup checks socketGroup's form only: whether the group exists is a fact
// of the machine allotd runs on, checked when it opens the socket (ResolveSocketGroup), so
// that a configuration can be checked elsewhere (the chart's tests load the agent's).
func (c *Config) validateSocketGroup() error {
	g := c.SocketGroup
	if g == "" {
		return nil
	}
	if n, err := strconv.ParseUint(g, 10, 32); err == nil {
		// (gid_t)-1 means "no change" to chown and is nobody's group.
		if n == 1<<32-1 {
			return fmt.Errorf("socketGroup: %s is not a valid gid", g)
		}
		return nil
	}
	if !groupName.MatchString(g) {
		return fmt.Errorf("socketGroup: %q is neither a group name nor a numeric gid", g)
	}
	return nil
}

// SocketGroup is socketGroup resolved on this machine.
type SocketGroup struct {
	GID uint32
	// Name is the group's name, empty for a gid without one here.
	Name string
}

// ResolveSocketGroup resolves socketGroup: a name through the system's group database, a
// number as it is (a container image often has no /etc/group entry for a host group; its
// name is looked up for messages only). It returns nil when socketGroup is not set.
func (c *Config) ResolveSocketGroup() (*SocketGroup, error) {
	g := c.SocketGroup
	if g == "" {
		return nil, nil
	}
	if n, err := strconv.ParseUint(g, 10, 32); err == nil {
		sg := &SocketGroup{GID: uint32(n)}
		if grp, err := user.LookupGroupId(g); err == nil {
			sg.Name = grp.Name
		}
		return sg, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		var unknown user.UnknownGroupError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("socketGroup: group %q does not exist on this machine (a numeric gid needs no entry in /etc/group)", g)
		}
		return nil, fmt.Errorf("socketGroup: look up group %q: %w", g, err)
	}
	n, err := strconv.ParseUint(grp.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("socketGroup: group %q has gid %q, not a number", g, grp.Gid)
	}
	return &SocketGroup{GID: uint32(n), Name: grp.Name}, nil
}
