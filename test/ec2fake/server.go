package ec2fake

import (
	"fmt"
	"math/rand"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Bucket is a token bucket: Size tokens at most, Refill tokens per second.
type Bucket struct {
	Size   float64
	Refill float64
}

// AWS-like bucket sizes (EC2 API request throttling documentation, per action).
var (
	MutatingBucket = Bucket{Size: 100, Refill: 5}
	DescribeBucket = Bucket{Size: 100, Refill: 20}
)

// mutating lists the actions that use the mutating bucket; every other action is
// non-mutating (Describe*).
var mutating = map[string]bool{
	"CreateNetworkInterface":          true,
	"AttachNetworkInterface":          true,
	"DeleteNetworkInterface":          true,
	"ModifyNetworkInterfaceAttribute": true,
	"AssignPrivateIpAddresses":        true,
	"UnassignPrivateIpAddresses":      true,
	"CreateTags":                      true,
}

// Options configure a Server. The zero value is a fake without throttling, latency or faults.
type Options struct {
	// Throttle enables the per-action token buckets.
	Throttle bool
	// Mutating and Describe override the bucket sizes (zero: MutatingBucket, DescribeBucket).
	Mutating, Describe Bucket
	// TimeScale speeds up the buckets' clock: refill rates are multiplied by it, so a
	// benchmark can run N times faster than AWS would allow while throttling at the same
	// points of its (scaled) timeline. 0 means 1.
	TimeScale float64
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Latency is added to every call (after throttling, before the answer).
	Latency time.Duration
	// Types are the instance types the fake knows (default DefaultTypeLimits).
	Types map[string]TypeLimits
	// Seed seeds the random fault injection (deterministic per seed).
	Seed int64
}

// Server is an EC2 Query-protocol fake. It is safe for concurrent use.
type Server struct {
	opts Options

	mu        sync.Mutex
	vpcs      map[string]*VPC
	subnets   map[string]*Subnet
	sgs       map[string]*SecurityGroup
	instances map[string]*Instance
	enis      map[string]*ENI
	types     map[string]TypeLimits
	seq       map[string]int // ID counters per prefix
	buckets   map[string]*bucketState
	calls     map[string]*ActionStats
	scripts   []*script
	random    []randomFault
	rnd       *rand.Rand
	reqSeq    int
	latency   time.Duration
}

type bucketState struct {
	tokens float64
	last   time.Time
}

// ActionStats counts one action's calls.
type ActionStats struct {
	Calls     int            // every request received, whatever its outcome
	OK        int            // requests answered successfully
	Throttled int            // answered RequestLimitExceeded by the token bucket
	Errors    map[string]int // error code -> count (scripted, random and real errors)
}

type script struct {
	action string // "" = any action
	n      int
	code   string
	after  bool // apply the action, then fail the answer
}

type randomFault struct {
	action string
	p      float64
	code   string
}

// New returns an empty fake.
func New(opts Options) *Server {
	if opts.Mutating == (Bucket{}) {
		opts.Mutating = MutatingBucket
	}
	if opts.Describe == (Bucket{}) {
		opts.Describe = DescribeBucket
	}
	if opts.TimeScale <= 0 {
		opts.TimeScale = 1
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	types := opts.Types
	if types == nil {
		types = DefaultTypeLimits
	}
	s := &Server{
		opts:      opts,
		vpcs:      map[string]*VPC{},
		subnets:   map[string]*Subnet{},
		sgs:       map[string]*SecurityGroup{},
		instances: map[string]*Instance{},
		enis:      map[string]*ENI{},
		types:     map[string]TypeLimits{},
		seq:       map[string]int{},
		buckets:   map[string]*bucketState{},
		calls:     map[string]*ActionStats{},
		rnd:       rand.New(rand.NewSource(opts.Seed)),
		latency:   opts.Latency,
	}
	for k, v := range types {
		s.types[k] = v
	}
	return s
}

func (s *Server) newID(prefix string) string {
	s.seq[prefix]++
	return fmt.Sprintf("%s-%017x", prefix, s.seq[prefix])
}

// AddVPC adds a VPC; an empty ID gets a generated one, which is returned.
func (s *Server) AddVPC(v VPC) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v.ID == "" {
		v.ID = s.newID("vpc")
	}
	v.Tags = cloneTags(v.Tags)
	s.vpcs[v.ID] = &v
	return v.ID
}

// AddSubnet adds a subnet of an existing VPC.
func (s *Server) AddSubnet(sn Subnet) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.vpcs[sn.VPC]; !ok {
		return "", fmt.Errorf("ec2fake: subnet: unknown VPC %q", sn.VPC)
	}
	if !sn.CIDR.IsValid() || sn.AZ == "" {
		return "", fmt.Errorf("ec2fake: subnet: CIDR and AZ are required")
	}
	if sn.ID == "" {
		sn.ID = s.newID("subnet")
	}
	sn.CIDR = sn.CIDR.Masked()
	sn.Tags = cloneTags(sn.Tags)
	sn.used = map[netip.Addr]string{}
	s.subnets[sn.ID] = &sn
	return sn.ID, nil
}

// AddSecurityGroup adds a security group.
func (s *Server) AddSecurityGroup(g SecurityGroup) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.ID == "" {
		g.ID = s.newID("sg")
	}
	if g.Name == "" {
		g.Name = g.ID
	}
	g.Tags = cloneTags(g.Tags)
	s.sgs[g.ID] = &g
	return g.ID
}

// AddInstance adds a running instance in inst.Subnet and creates its primary ENI (device
// index 0, delete on termination) with one primary address. It returns the instance ID.
func (s *Server) AddInstance(inst Instance) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn, ok := s.subnets[inst.Subnet]
	if !ok {
		return "", fmt.Errorf("ec2fake: instance: unknown subnet %q", inst.Subnet)
	}
	if _, ok := s.types[inst.Type]; !ok {
		return "", fmt.Errorf("ec2fake: instance: unknown instance type %q", inst.Type)
	}
	if inst.ID == "" {
		inst.ID = s.newID("i")
	}
	inst.AZ, inst.VPC = sn.AZ, sn.VPC
	inst.Tags = cloneTags(inst.Tags)
	eni, err := s.createENI(sn, inst.SecurityGroups, "Primary network interface", nil, 0, nil)
	if err != nil {
		return "", fmt.Errorf("ec2fake: instance: %w", err)
	}
	eni.Attachment = &Attachment{ID: s.newID("eni-attach"), InstanceID: inst.ID, DeviceIndex: 0, DeleteOnTermination: true}
	inst.PrimaryENI = eni.ID
	s.instances[inst.ID] = &inst
	return inst.ID, nil
}

// createENI creates an available ENI in sn with a primary address and count secondary ones
// (or the explicit addresses). Callers hold s.mu and have checked the subnet has room.
func (s *Server) createENI(sn *Subnet, sgs []string, desc string, tags map[string]string, count int, explicit []netip.Addr) (*ENI, error) {
	need := 1 + count + len(explicit)
	if sn.free() < uint64(need) {
		return nil, apiError{status: 400, code: "InsufficientFreeAddressesInSubnet",
			msg: fmt.Sprintf("insufficient free addresses in subnet %s to create the network interface", sn.ID)}
	}
	id := s.newID("eni")
	n := s.seq["eni"]
	e := &ENI{
		ID: id, Subnet: sn.ID, VPC: sn.VPC, AZ: sn.AZ, Description: desc,
		MAC:            fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n)),
		SecurityGroups: append([]string(nil), sgs...),
		Tags:           cloneTags(tags),
	}
	sort.Strings(e.SecurityGroups)
	for _, a := range explicit {
		if err := sn.takeExact(a, id); err != nil {
			s.releaseAll(e)
			return nil, apiError{status: 400, code: "InvalidParameterValue", msg: err.Error()}
		}
		e.Secondary = append(e.Secondary, a)
	}
	p, _ := sn.take(id)
	e.PrimaryIP = p
	for i := 0; i < count; i++ {
		a, _ := sn.take(id)
		e.Secondary = append(e.Secondary, a)
	}
	s.enis[id] = e
	return e, nil
}

func (s *Server) releaseAll(e *ENI) {
	sn := s.subnets[e.Subnet]
	if e.PrimaryIP.IsValid() {
		delete(sn.used, e.PrimaryIP)
	}
	for _, a := range e.Secondary {
		delete(sn.used, a)
	}
	for _, p := range e.Prefixes4 {
		sn.freeBlock4(p)
	}
	for _, p := range e.Prefixes6 {
		delete(sn.used6, p)
	}
}

// SetLatency changes the latency added to every call.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	s.latency = d
	s.mu.Unlock()
}

// FailNext makes the next n calls of action ("" = any action) fail with code before they
// change anything. RequestLimitExceeded, ServiceUnavailable and Unavailable answer HTTP 503,
// InternalError 500, anything else 400.
func (s *Server) FailNext(action string, n int, code string) {
	s.mu.Lock()
	s.scripts = append(s.scripts, &script{action: action, n: n, code: code})
	s.mu.Unlock()
}

// FailNextAfterApply makes the next n calls of action succeed in the fake's state but answer
// with code: the answer is lost, as when a connection drops after EC2 committed a change.
func (s *Server) FailNextAfterApply(action string, n int, code string) {
	s.mu.Lock()
	s.scripts = append(s.scripts, &script{action: action, n: n, code: code, after: true})
	s.mu.Unlock()
}

// SetRandomFault makes a fraction p (0..1) of the calls of action ("" = any) fail with code
// before they change anything. Several random faults may be set; each call draws once per
// fault, in the order they were set. p = 0 removes the fault.
func (s *Server) SetRandomFault(action string, p float64, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.random[:0]
	for _, f := range s.random {
		if f.action != action || f.code != code {
			out = append(out, f)
		}
	}
	s.random = out
	if p > 0 {
		s.random = append(s.random, randomFault{action: action, p: p, code: code})
	}
}

// ClearFaults removes every scripted and random fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	s.scripts, s.random = nil, nil
	s.mu.Unlock()
}

// Stats returns a copy of the per-action counters.
func (s *Server) Stats() map[string]ActionStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]ActionStats, len(s.calls))
	for k, v := range s.calls {
		c := *v
		c.Errors = make(map[string]int, len(v.Errors))
		for ek, ev := range v.Errors {
			c.Errors[ek] = ev
		}
		out[k] = c
	}
	return out
}

// Calls returns how many requests of action the fake received ("" = all actions).
func (s *Server) Calls(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, v := range s.calls {
		if action == "" || k == action {
			n += v.Calls
		}
	}
	return n
}

// ResetStats zeroes the counters.
func (s *Server) ResetStats() {
	s.mu.Lock()
	s.calls = map[string]*ActionStats{}
	s.mu.Unlock()
}

// ENIs returns copies of every ENI, sorted by ID.
func (s *Server) ENIs() []ENI {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ENI, 0, len(s.enis))
	for _, k := range sortedKeys(s.enis) {
		out = append(out, s.enis[k].clone())
	}
	return out
}

// InstanceENIs returns copies of the ENIs attached to an instance, sorted by device index.
func (s *Server) InstanceENIs(instance string) []ENI {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ENI
	for _, k := range sortedKeys(s.enis) {
		e := s.enis[k]
		if e.Attachment != nil && e.Attachment.InstanceID == instance {
			out = append(out, e.clone())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Attachment.DeviceIndex < out[j].Attachment.DeviceIndex })
	return out
}

// SubnetFree returns the subnet's free address count.
func (s *Server) SubnetFree(id string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sn, ok := s.subnets[id]; ok {
		return sn.free()
	}
	return 0
}

// CheckInvariants verifies the fake's own bookkeeping: every address on an ENI is inside its
// subnet and recorded as used by that ENI, no address is on two ENIs, and every instance's
// attachments respect its type's limits. Tests call it after a run.
func (s *Server) CheckInvariants() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[netip.Addr]string{}
	perInstance := map[string]int{}
	for _, id := range sortedKeys(s.enis) {
		e := s.enis[id]
		sn := s.subnets[e.Subnet]
		for _, a := range append(append([]netip.Addr{e.PrimaryIP}, e.Secondary...), prefixAddrs(e.Prefixes4)...) {
			if prev, dup := seen[a]; dup {
				return fmt.Errorf("address %s is on %s and %s", a, prev, id)
			}
			seen[a] = id
			if owner := sn.used[a]; owner != id {
				return fmt.Errorf("address %s of %s is recorded for %q in subnet %s", a, id, owner, sn.ID)
			}
		}
		if e.Attachment != nil {
			inst := s.instances[e.Attachment.InstanceID]
			perInstance[inst.ID]++
			if lim := s.types[inst.Type]; e.slotsUsed() > lim.IPv4PerENI {
				return fmt.Errorf("%s carries %d addresses and prefixes, limit of %s is %d", id, e.slotsUsed(), inst.Type, lim.IPv4PerENI)
			}
		}
	}
	for id, n := range perInstance {
		if lim := s.types[s.instances[id].Type]; n > lim.ENIs {
			return fmt.Errorf("instance %s has %d ENIs, limit %d", id, n, lim.ENIs)
		}
	}
	for _, id := range sortedKeys(s.subnets) {
		for a, owner := range s.subnets[id].used {
			if seen[a] != owner {
				return fmt.Errorf("subnet %s records %s for %s, which does not hold it", id, a, owner)
			}
		}
	}
	return nil
}

// apiError is an EC2 error answer.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e apiError) Error() string { return e.code + ": " + e.msg }

func errorFor(code string) apiError {
	status := 400
	switch code {
	case "RequestLimitExceeded", "ServiceUnavailable", "Unavailable":
		status = 503
	case "InternalError", "InternalFailure":
		status = 500
	}
	return apiError{status: status, code: code, msg: "injected fault"}
}

// ServeHTTP implements http.Handler: one EC2 Query-protocol request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, apiError{status: 400, code: "MalformedQueryString", msg: err.Error()}, "0")
		return
	}
	action := r.Form.Get("Action")

	s.mu.Lock()
	s.reqSeq++
	reqID := fmt.Sprintf("fake-%08d", s.reqSeq)
	st := s.calls[action]
	if st == nil {
		st = &ActionStats{Errors: map[string]int{}}
		s.calls[action] = st
	}
	st.Calls++
	latency := s.latency
	pre, after := s.pickFault(action)
	throttled := pre == nil && !s.takeToken(action)
	if throttled {
		st.Throttled++
		st.Errors["RequestLimitExceeded"]++
	} else if pre != nil {
		st.Errors[pre.code]++
	}
	s.mu.Unlock()

	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
	}
	if throttled {
		writeError(w, apiError{status: 503, code: "RequestLimitExceeded", msg: "Request limit exceeded."}, reqID)
		return
	}
	if pre != nil {
		writeError(w, *pre, reqID)
		return
	}

	h, ok := handlers[action]
	if !ok {
		s.count(action, "InvalidAction")
		writeError(w, apiError{status: 400, code: "InvalidAction", msg: fmt.Sprintf("The action %s is not valid for this web service.", action)}, reqID)
		return
	}
	s.mu.Lock()
	body, err := h(s, r.Form)
	s.mu.Unlock()
	if err == nil && after != nil {
		err = *after
	}
	if err != nil {
		ae, ok := err.(apiError)
		if !ok {
			ae = apiError{status: 500, code: "InternalError", msg: err.Error()}
		}
		if after == nil {
			s.count(action, ae.code)
		} else {
			s.count(action, "after-apply:"+ae.code)
		}
		writeError(w, ae, reqID)
		return
	}
	s.count(action, "")
	writeOK(w, action, reqID, body)
}

func (s *Server) count(action, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.calls[action]
	if code == "" {
		st.OK++
		return
	}
	st.Errors[code]++
}

// pickFault consumes a scripted fault or draws a random one. Callers hold s.mu.
func (s *Server) pickFault(action string) (pre, after *apiError) {
	for i, sc := range s.scripts {
		if sc.action != "" && sc.action != action {
			continue
		}
		sc.n--
		if sc.n <= 0 {
			s.scripts = append(s.scripts[:i:i], s.scripts[i+1:]...)
		}
		e := errorFor(sc.code)
		if sc.after {
			return nil, &e
		}
		return &e, nil
	}
	for _, f := range s.random {
		if f.action != "" && f.action != action {
			continue
		}
		if s.rnd.Float64() < f.p {
			e := errorFor(f.code)
			return &e, nil
		}
	}
	return nil, nil
}

// takeToken takes one token from action's bucket. Callers hold s.mu.
func (s *Server) takeToken(action string) bool {
	if !s.opts.Throttle {
		return true
	}
	b := s.opts.Describe
	if mutating[action] {
		b = s.opts.Mutating
	}
	now := s.opts.Now()
	st := s.buckets[action]
	if st == nil {
		st = &bucketState{tokens: b.Size, last: now}
		s.buckets[action] = st
	}
	elapsed := now.Sub(st.last).Seconds() * s.opts.TimeScale
	if elapsed > 0 {
		st.tokens += elapsed * b.Refill
		if st.tokens > b.Size {
			st.tokens = b.Size
		}
		st.last = now
	}
	if st.tokens < 1 {
		return false
	}
	st.tokens--
	return true
}

// form helpers --------------------------------------------------------------------------

// list returns the values of a flattened list parameter: prefix.1, prefix.2, ...
func list(f url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := f[prefix+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

// tagList reads prefix.N.Key / prefix.N.Value pairs.
func tagList(f url.Values, prefix string) map[string]string {
	var out map[string]string
	for i := 1; ; i++ {
		k, ok := f[prefix+"."+strconv.Itoa(i)+".Key"]
		if !ok {
			return out
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k[0]] = f.Get(prefix + "." + strconv.Itoa(i) + ".Value")
	}
}

func intParam(f url.Values, name string, def int) (int, error) {
	v := f.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, apiError{status: 400, code: "InvalidParameterValue", msg: fmt.Sprintf("Value (%s) for parameter %s is invalid.", v, name)}
	}
	return n, nil
}

func missing(name string) error {
	return apiError{status: 400, code: "MissingParameter", msg: fmt.Sprintf("The request must contain the parameter %s", name)}
}
