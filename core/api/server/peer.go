package server

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/allot-ipam/allot/core/api"
	"github.com/allot-ipam/allot/core/api/frame"
)

// Access says who may use the local API besides root.
type Access struct {
	// Group, when set, admits the members of this group (primary or supplementary).
	Group *Group
	// Log receives one warning per refused connection; nil means slog.Default().
	Log *slog.Logger
}

// Group is the group of socketGroup.
type Group struct {
	ID uint32
	// Name is for messages only; empty when the gid has no name on this machine.
	Name string
}

func (g *Group) String() string {
	if g.Name != "" {
		return g.Name
	}
	return strconv.FormatUint(uint64(g.ID), 10)
}

// Peer is the process at the other end of a unix socket connection, as the kernel recorded
// it when that process connected.
type Peer struct {
	PID int32
	UID uint32
	GID uint32
	// Groups are the supplementary groups (SO_PEERGROUPS); nil when not read (the uid or
	// the primary gid decided) or when the kernel does not report them (before Linux 4.13).
	Groups []uint32
}

// PeerListener wraps a unix socket listener so that Accept returns only connections whose
// peer is root, allotd's own user, or a member of a.Group. Any other connection gets the
// reason in the protocol it speaks (an error frame, or HTTP 403), in a goroutine of its own
// so that a peer that never sends anything holds up nobody, and is closed.
func PeerListener(l net.Listener, a Access) net.Listener {
	log := a.Log
	if log == nil {
		log = slog.Default()
	}
	return &peerListener{Listener: l, group: a.Group, self: uint32(os.Geteuid()), log: log}
}

type peerListener struct {
	net.Listener
	group *Group
	// self is allotd's effective uid: a process of the same user could read allotd's memory
	// and files anyway, so refusing it protects nothing (and allotd run by a user on a
	// socket of its own, for development, would refuse its own allotctl).
	self uint32
	log  *slog.Logger
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, denied := l.admit(c)
		if denied == nil {
			return c, nil
		}
		l.log.Warn("api: connection refused", "pid", p.PID, "uid", p.UID, "gid", p.GID, "reason", denied.Message)
		go refuse(c, denied)
	}
}

// admit reads c's peer credentials and returns a permission_denied error unless the peer may
// use the API. Credentials that cannot be read refuse the connection.
func (l *peerListener) admit(c net.Conn) (Peer, *api.Error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, api.Errorf(api.CodePermissionDenied, "allotd: permission denied: a %T has no peer credentials", c)
	}
	var p Peer
	var err error
	// Supplementary groups are read only when the uid and the primary gid did not decide.
	needGroups := func(p Peer) bool {
		return p.UID != 0 && p.UID != l.self && l.group != nil && p.GID != l.group.ID
	}
	if p, err = peerOf(uc, needGroups); err != nil {
		return p, api.Errorf(api.CodePermissionDenied, "allotd: permission denied: cannot read the peer's credentials: %v", err)
	}
	if p.UID == 0 || p.UID == l.self {
		return p, nil
	}
	if l.group != nil && (p.GID == l.group.ID || slices.Contains(p.Groups, l.group.ID)) {
		return p, nil
	}
	return p, api.Errorf(api.CodePermissionDenied, "allotd: permission denied: %s", l.deniedReason(p.UID))
}

// deniedReason says who is admitted, from the refused uid's point of view:
// "uid 1000 is not root or in group allot".
func (l *peerListener) deniedReason(uid uint32) string {
	who := []string{"root"}
	if l.self != 0 {
		who = append(who, fmt.Sprintf("allotd's own user (uid %d)", l.self))
	}
	if l.group != nil {
		who = append(who, "in group "+l.group.String())
	}
	s := fmt.Sprintf("uid %d is not ", uid)
	for i, w := range who {
		switch {
		case i == 0:
		case i == len(who)-1:
			s += " or "
		default:
			s += ", "
		}
		s += w
	}
	return s
}

// refuseTimeout bounds how long a refused connection may take to send its first request
// and read the answer.
const refuseTimeout = 5 * time.Second

// refuseReadLimit bounds what is read from a refused peer: its first request's headers, or
// a frame header; larger payloads are not drained.
const refuseReadLimit = 64 << 10

// refuse answers a refused connection's first request with e, in its protocol, and closes it.
func refuse(c net.Conn, e *api.Error) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseTimeout))
	lr := &io.LimitedReader{R: c, N: refuseReadLimit}
	br := bufio.NewReaderSize(lr, 4096)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == frame.Preface[0] {
		refuseFramed(c, br, e)
	} else {
		refuseHTTP(c, br, e)
	}
	// Lingering close: stop sending, then read what the peer still sends until it closes.
	// Closing a unix socket with unread data resets the peer's side, which could cost it
	// the answer it has not read yet.
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, br)
}

// refuseFramed answers the first frame of a framed connection with an error frame of the
// same id, which a client reports as that request's error.
func refuseFramed(c net.Conn, br *bufio.Reader, e *api.Error) {
	pre := make([]byte, len(frame.Preface))
	if _, err := io.ReadFull(br, pre); err != nil || string(pre) != frame.Preface {
		return
	}
	// Only the header: the payload is not decoded (nor held in memory) for a refused peer.
	var h [frame.HeaderSize]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return
	}
	id := binary.BigEndian.Uint32(h[4:8])
	if n := int64(binary.BigEndian.Uint32(h[:4])) - (frame.HeaderSize - 4); n > 0 {
		_, _ = io.CopyN(io.Discard, br, n)
	}
	b := append([]byte(frame.Preface), frame.Append(nil, id, frame.OpError, frame.AppendError(nil, e))...)
	_, _ = c.Write(b)
}

// refuseHTTP answers an HTTP request with 403 and the error as the API's JSON error body.
func refuseHTTP(c net.Conn, br *bufio.Reader, e *api.Error) {
	req, err := http.ReadRequest(br)
	if err == nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	body, _ := json.Marshal(e)
	body = append(body, '\n')
	resp := &http.Response{
		StatusCode:    http.StatusForbidden,
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Close:         true,
		Request:       req,
	}
	_ = resp.Write(c)
}
