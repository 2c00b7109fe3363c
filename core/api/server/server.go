// Package server serves the api.Service over HTTP/JSON, normally on a unix socket.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/allot-ipam/allot/core/api"
)

// maxBody bounds request bodies: a GC request lists every valid attachment on the node, so
// leave room for tens of thousands of them, but refuse unbounded input.
const maxBody = 8 << 20

// Handler returns the HTTP handler of the local API, without admission control (Server
// adds its Limits).
func Handler(svc api.Service, log *slog.Logger) http.Handler { return newHandler(svc, log, nil) }

func newHandler(svc api.Service, log *slog.Logger, lim *limiter) http.Handler {
	h := &handler{svc: svc, log: log, lim: lim}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/allocate", post(h, svc.Allocate))
	mux.HandleFunc("POST /v1/check", post(h, svc.Check))
	mux.HandleFunc("POST /v1/gc", post(h, svc.GC))
	mux.HandleFunc("POST /v1/release", post(h, func(ctx context.Context, r *api.ReleaseRequest) (*struct{}, error) {
		return &struct{}{}, svc.Release(ctx, r)
	}))
	mux.HandleFunc("POST /v1/explain", post(h, explainer(svc).Explain))
	mux.HandleFunc("GET /v1/status", get(h, svc.Status))
	mux.HandleFunc("GET /v1/pools", get(h, func(ctx context.Context) (*[]api.PoolStatus, error) {
		p, err := svc.Pools(ctx)
		return &p, err
	}))
	mux.HandleFunc("GET /v1/allocations", get(h, func(ctx context.Context) (*[]api.Allocation, error) {
		a, err := svc.Allocations(ctx)
		return &a, err
	}))
	mux.HandleFunc("GET /v1/plugins", get(h, func(ctx context.Context) (*[]api.PluginStatus, error) {
		p, err := svc.Plugins(ctx)
		return &p, err
	}))
	return mux
}

type handler struct {
	svc api.Service
	log *slog.Logger
	lim *limiter
}

func post[Req, Resp any](h *handler, fn func(context.Context, *Req) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			h.writeError(w, r, api.InvalidField("body", "cannot decode request: %v", err))
			return
		}
		release, err := h.lim.acquire(r.Context())
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		defer release()
		resp, err := fn(r.Context(), &req)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

func get[Resp any](h *handler, fn func(context.Context) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		release, err := h.lim.acquire(r.Context())
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		defer release()
		resp, err := fn(r.Context())
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

func (h *handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *api.Error
	if !errors.As(err, &e) {
		e = &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	if e.Code == api.CodeInternal {
		h.log.Error("api request failed", "path", r.URL.Path, "err", err)
	} else {
		h.log.Debug("api request refused", "path", r.URL.Path, "code", e.Code, "err", e.Error())
	}
	writeJSON(w, httpStatus(e.Code), e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Listen opens the unix socket at path with mode 0600, replacing a stale socket file left
// by a previous run, and admits only root and allotd's own user (ListenAccess). It refuses to
// replace a socket another live daemon is serving.
func Listen(path string) (net.Listener, error) { return ListenAccess(path, Access{}) }

// ListenAccess is Listen with the access a.Group grants: with a group, the socket file
// belongs to it and has mode 0660, and the group's members are admitted besides root.
// Every accepted connection's peer credentials are checked (PeerListener); the file mode
// alone is not trusted, as a process with CAP_DAC_OVERRIDE or a socket file whose mode was
// changed would get past it.
func ListenAccess(path string, a Access) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("api: create socket directory: %w", err)
	}
	if _, err := os.Stat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("api: socket %s is served by another process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("api: remove stale socket %s: %w", path, err)
		}
	}
	// Create the socket with no group/other access from the start: chmod after bind would leave
	// a window in which anyone could connect.
	old := umask(0o177)
	l, err := net.Listen("unix", path)
	umask(old)
	if err != nil {
		return nil, fmt.Errorf("api: listen on %s: %w", path, err)
	}
	mode := os.FileMode(0o600)
	if a.Group != nil {
		// The group first, then the mode: in between the socket is still 0600, never open
		// to a group it does not belong to yet.
		if err := os.Lchown(path, -1, int(a.Group.ID)); err != nil {
			l.Close()
			return nil, fmt.Errorf("api: socketGroup: give %s to group %s: %w", path, a.Group, err)
		}
		mode = 0o660
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("api: chmod %s: %w", path, err)
	}
	return PeerListener(l, a), nil
}

// NewHTTPServer returns an http.Server for the handler with timeouts suited to a local API.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
}

// httpStatus maps an error code to the HTTP status the server answers with. It lives here,
// not in core/api, so that allot-cni (which imports core/api) does not link net/http: that
// costs about 1.6 ms per exec.
func httpStatus(c api.ErrorCode) int {
	switch c {
	case api.CodeInvalid:
		return http.StatusBadRequest
	case api.CodeNotFound:
		return http.StatusNotFound
	case api.CodeConflict:
		return http.StatusConflict
	case api.CodeExhausted, api.CodeNoPool:
		return http.StatusUnprocessableEntity
	case api.CodeUnavailable:
		return http.StatusServiceUnavailable
	case api.CodePermissionDenied:
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}
