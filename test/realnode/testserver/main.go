// Command testserver is the program of the real-node tests' images. Without arguments it
// blocks until SIGTERM (the pause image: a pod sandbox's first process); with `serve` it
// also serves HTTP on :8080:
//
//	GET /           {"hostname", "addrs": the pod's addresses, "remote": the peer it sees}
//	GET /fetch?url= GETs url from inside the pod and relays status and body (pod-to-pod and
//	                pod-to-outside traffic without kubectl exec)
//	GET /healthz    ok
package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		srv := &http.Server{Addr: ":8080", Handler: handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
				os.Stderr.WriteString("testserver: " + err.Error() + "\n")
				os.Exit(1)
			}
		}()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return
	}
	<-ctx.Done()
}

func handler() http.Handler {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/fetch", func(w http.ResponseWriter, r *http.Request) {
		resp, err := client.Get(r.URL.Query().Get("url"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		host, _ := os.Hostname()
		var addrs []string
		if as, err := net.InterfaceAddrs(); err == nil {
			for _, a := range as {
				if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
					addrs = append(addrs, n.String())
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"hostname": host, "addrs": addrs, "remote": r.RemoteAddr})
	})
	return mux
}
