package ec2fake

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// IMDS is a fake of the EC2 instance metadata service for one instance of a Server, as the
// real aws-sdk-go-v2 feature/ec2/imds client talks to it: IMDSv2 only (HttpTokens required),
// a session token from PUT /latest/api/token, then GET /latest/meta-data/<path> with the
// token in X-aws-ec2-metadata-token. Paths: instance-id, and mac (the MAC of the instance's
// ENI at device index 0, read from the Server's state at each request). Others answer 404.
type IMDS struct {
	s        *Server
	instance string

	mu     sync.Mutex
	tokens map[string]bool
	calls  map[string]int
}

// IMDS returns the metadata service of instance.
func (s *Server) IMDS(instance string) *IMDS {
	return &IMDS{s: s, instance: instance, tokens: map[string]bool{}, calls: map[string]int{}}
}

// StartIMDS serves m on 127.0.0.1 until the test ends and returns its base URL (the IMDS
// client's Endpoint).
func StartIMDS(t testing.TB, m *IMDS) string {
	t.Helper()
	ts := httptest.NewServer(m)
	t.Cleanup(ts.Close)
	return ts.URL
}

// Calls returns how many requests reached "PUT /latest/api/token" or "GET <meta-data path>"
// (answered or refused).
func (m *IMDS) Calls(what string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[what]
}

// ServeHTTP answers as IMDS does, with HTTP status codes of its documentation (400 for a
// token request without a valid TTL, 401 for metadata without a valid token).
func (m *IMDS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPut && r.URL.Path == "/latest/api/token" {
		m.token(w, r)
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/latest/meta-data/")
	if r.Method != http.MethodGet || !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	m.mu.Lock()
	m.calls["GET "+path]++
	valid := m.tokens[r.Header.Get("X-aws-ec2-metadata-token")]
	m.mu.Unlock()
	if !valid {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	v, ok := m.metadata(path)
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	fmt.Fprint(w, v)
}

func (m *IMDS) token(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["PUT /latest/api/token"]++
	ttl, err := strconv.Atoi(r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
	if err != nil || ttl < 1 || ttl > 21600 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	tok := fmt.Sprintf("fake-imds-token-%d", len(m.tokens)+1)
	m.tokens[tok] = true
	w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", strconv.Itoa(ttl))
	fmt.Fprint(w, tok)
}

func (m *IMDS) metadata(path string) (string, bool) {
	switch path {
	case "instance-id":
		return m.instance, true
	case "mac":
		enis := m.s.InstanceENIs(m.instance)
		if len(enis) == 0 || enis[0].Attachment.DeviceIndex != 0 {
			return "", false
		}
		return enis[0].MAC, true
	}
	return "", false
}

// NewInstance is a fake with one m5.large instance in a /24 of a VPC, for tests that need an
// instance and its primary ENI (the IMDS's mac) and nothing else; it returns the instance ID.
func NewInstance(t testing.TB) (*Server, string) {
	t.Helper()
	s := New(Options{})
	vpc := s.AddVPC(VPC{CIDR: netip.MustParsePrefix("10.0.0.0/16")})
	sub, err := s.AddSubnet(Subnet{VPC: vpc, AZ: "us-east-1a", CIDR: netip.MustParsePrefix("10.0.0.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.AddInstance(Instance{Type: "m5.large", Subnet: sub})
	if err != nil {
		t.Fatal(err)
	}
	return s, id
}
