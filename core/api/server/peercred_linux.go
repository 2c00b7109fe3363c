package server

import (
	"errors"
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerOf reads the credentials the kernel recorded when the peer connected (SO_PEERCRED),
// and its supplementary groups (SO_PEERGROUPS) if needGroups says they matter. Both are
// the connecting process's at connect time, translated into allotd's namespaces; unlike
// /proc/<pid>, they cannot change under us when the peer exits and its pid is reused.
func peerOf(c *net.UnixConn, needGroups func(Peer) bool) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var p Peer
	var opErr error
	err = raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			opErr = fmt.Errorf("SO_PEERCRED: %w", err)
			return
		}
		p = Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}
		if !needGroups(p) {
			return
		}
		p.Groups, err = peerGroups(int(fd))
		if errors.Is(err, unix.ENOPROTOOPT) {
			// Linux before 4.13: only the primary gid counts (SECURITY.md).
			return
		}
		if err != nil {
			opErr = fmt.Errorf("SO_PEERGROUPS: %w", err)
		}
	})
	if err != nil {
		return p, fmt.Errorf("peer credentials: %w", err)
	}
	return p, opErr
}

// peerGroups reads SO_PEERGROUPS, an array of gid_t that x/sys/unix has no getter for. The
// kernel answers ERANGE with the size it needs when the buffer is too small.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for range 3 {
		size := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch errno {
		case 0:
			return buf[:size/4], nil
		case unix.ERANGE:
			buf = make([]uint32, size/4+1)
		default:
			return nil, errno
		}
	}
	return nil, unix.ERANGE
}
