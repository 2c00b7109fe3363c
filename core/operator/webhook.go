package operator

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	allotk8s "github.com/allot-ipam/allot/core/k8s"
	allotv1 "github.com/allot-ipam/allot/core/k8s/apis/allot/v1alpha1"
)

// Webhook defaults.
const (
	DefaultWebhookPath       = "/validate"
	DefaultWebhookConfigName = "allot-shared-pools.allot.io"
	DefaultWebhookTimeout    = 5
	// maxCABundleCerts bounds a caBundle merged from generated CAs (one per replica start).
	maxCABundleCerts = 8
	maxAdmissionBody = 3 << 20
)

// WebhookOptions configure the admission webhook for SharedIPPool and ReservedIP, and for
// ClusterCIDRConfig when Options.ClusterCIDRConfig is on (clustercidr_rules.go: the cluster
// pod CIDR and the stack rule).
//
// Certificates: with CertDir, tls.crt and tls.key are read from it (and re-read when they
// change, e.g. cert-manager renewing them) and the caBundle is its ca.crt (else tls.crt).
// Without, each replica generates a CA and a serving certificate at start; when it registers
// the webhook it adds its CA to the caBundle (keeping the other replicas' CAs), so any
// replica behind the Service is trusted.
//
// Registration: with Register, the replica creates or updates the
// ValidatingWebhookConfiguration ConfigName pointing at URL, or at the Service
// ServiceNamespace/ServiceName:ServicePort. Without, deploy/webhook has a manifest to apply
// (its caBundle filled by cert-manager's CA injector).
//
// FailurePolicy is Fail by default: a pool change the webhook cannot check is refused rather
// than let through, since an overlapping pool stops one of the two pools serving (the
// operator marks the newer one AddressConflict and agents skip it). Pool edits are rare and
// the operator replicas serve the webhook, so Fail costs little; metadata-only updates
// (finalizers, labels) are not sent to the webhook at all (matchConditions), so an operator
// outage never blocks a deletion. Ignore trades that safety for availability.
type WebhookOptions struct {
	// Address to listen on (":9443"); empty turns the webhook off.
	Address string
	// Path of the handler (default /validate).
	Path string
	// CertDir holds tls.crt, tls.key and optionally ca.crt; empty: generated.
	CertDir string
	// Hosts are DNS names or IPs of the generated serving certificate (default: the
	// Service's DNS names, the URL's host, localhost and 127.0.0.1).
	Hosts []string
	// Register creates or updates the ValidatingWebhookConfiguration.
	Register bool
	// ConfigName names it (default allot-shared-pools.allot.io).
	ConfigName string
	// URL the API server calls (https://host:port/path). Empty with no ServiceName: the
	// listener's own address (tests; an operator on the API server's host).
	URL string
	// ServiceNamespace, ServiceName and ServicePort (default 443) reference the Service in
	// front of the operator replicas.
	ServiceNamespace string
	ServiceName      string
	ServicePort      int32
	// FailurePolicy: "Fail" (default) or "Ignore".
	FailurePolicy string
	// TimeoutSeconds the API server waits for an answer (default 5, at most 30).
	TimeoutSeconds int32
}

func (o *WebhookOptions) defaults() error {
	if o.Address == "" {
		return nil
	}
	if o.Path == "" {
		o.Path = DefaultWebhookPath
	}
	if o.ConfigName == "" {
		o.ConfigName = DefaultWebhookConfigName
	}
	if o.ServicePort == 0 {
		o.ServicePort = 443
	}
	if o.TimeoutSeconds == 0 {
		o.TimeoutSeconds = DefaultWebhookTimeout
	}
	switch {
	case o.FailurePolicy == "":
		o.FailurePolicy = string(admissionregv1.Fail)
	case o.FailurePolicy != string(admissionregv1.Fail) && o.FailurePolicy != string(admissionregv1.Ignore):
		return fmt.Errorf("operator: SharedPools.Webhook.FailurePolicy: %q must be Fail or Ignore", o.FailurePolicy)
	}
	if o.TimeoutSeconds < 1 || o.TimeoutSeconds > 30 {
		return fmt.Errorf("operator: SharedPools.Webhook.TimeoutSeconds: %d must be between 1 and 30", o.TimeoutSeconds)
	}
	if o.URL != "" {
		u, err := url.Parse(o.URL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("operator: SharedPools.Webhook.URL: %q must be an https URL", o.URL)
		}
	}
	if (o.ServiceName == "") != (o.ServiceNamespace == "") {
		return errors.New("operator: SharedPools.Webhook.ServiceName and ServiceNamespace: set both or neither")
	}
	return nil
}

// webhookServer is the running webhook of one replica.
type webhookServer struct {
	o     *WebhookOptions
	log   *slog.Logger
	c     client.Client // the API server itself: admission must not judge on a stale cache
	m     *sharedMetrics
	certs *certSource
	caPEM []byte // what the caBundle must hold for this replica
	// shared: SharedIPPools and ReservedIPs are checked; ccc: ClusterCIDRConfigs are, against
	// podCIDRs (the operator's ClusterPodCIDRs) and the other configs.
	shared, ccc bool
	podCIDRs    []netip.Prefix
	ln          net.Listener
	srv         *http.Server
	// ippoolMode is the mode that refuses IPPools ("" in multi-pool mode, which uses them).
	ippoolMode string
}

// startWebhook starts the admission webhook (a no-op when Address is empty, or when neither
// shared pools nor ClusterCIDRConfigs are on) and returns its stop function.
func startWebhook(ctx context.Context, opts *Options, log *slog.Logger) (func(), error) {
	o := &opts.SharedPools.Webhook
	if o.Address == "" || (opts.SharedPools.Disable && !opts.ClusterCIDRConfig) {
		return func() {}, nil
	}
	log = log.With("component", "webhook")
	w, err := newWebhookServer(opts, log)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+o.Path, w.serveAdmission)
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("ok\n")) })
	w.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: w.certs.get},
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() {
		if err := w.srv.ServeTLS(w.ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("webhook server stopped", "err", err)
		}
	}()
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if o.Register {
		wg.Go(func() { w.registerLoop(rctx) })
	}
	log.Info("admission webhook serving", "address", w.ln.Addr().String(), "url", o.URL, "service", o.ServiceNamespace+"/"+o.ServiceName)
	return func() {
		cancel()
		wg.Wait()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = w.srv.Shutdown(sctx)
	}, nil
}

// newWebhookServer makes the webhook's client, listener and certificates.
func newWebhookServer(opts *Options, log *slog.Logger) (*webhookServer, error) {
	o := &opts.SharedPools.Webhook
	m, err := newSharedMetrics(opts.Registry)
	if err != nil {
		return nil, err
	}
	c, err := client.New(opts.RESTConfig, client.Options{Scheme: allotk8s.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("operator: webhook client: %w", err)
	}
	ln, err := net.Listen("tcp", o.Address)
	if err != nil {
		return nil, fmt.Errorf("operator: SharedPools.Webhook.Address: %w", err)
	}
	w := &webhookServer{o: o, log: log, c: c, m: m, ln: ln,
		shared: !opts.SharedPools.Disable, ccc: opts.ClusterCIDRConfig, podCIDRs: opts.ClusterPodCIDRs,
		ippoolMode: ippoolMode(opts)}
	if o.URL == "" && o.ServiceName == "" {
		o.URL = "https://" + listenHostPort(ln.Addr()) + o.Path
	}
	if o.CertDir != "" {
		w.certs, w.caPEM, err = loadCertDir(o.CertDir)
	} else {
		w.certs, w.caPEM, err = generateCerts(webhookHosts(o))
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("operator: webhook certificates: %w", err)
	}
	return w, nil
}

func listenHostPort(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func webhookHosts(o *WebhookOptions) []string {
	if len(o.Hosts) > 0 {
		return o.Hosts
	}
	var hosts []string
	if o.ServiceName != "" {
		s, ns := o.ServiceName, o.ServiceNamespace
		hosts = append(hosts, s, s+"."+ns, s+"."+ns+".svc", s+"."+ns+".svc.cluster.local")
	}
	if u, err := url.Parse(o.URL); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	hosts = append(hosts, "localhost", "127.0.0.1")
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// serveAdmission answers one AdmissionReview.
func (w *webhookServer) serveAdmission(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAdmissionBody))
	if err != nil {
		http.Error(rw, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(rw, "not an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	req := review.Request
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	kind := req.Resource.Resource
	problems, err := w.judge(r.Context(), req)
	switch {
	case err != nil:
		// Could not check (API server unreachable...): refuse, as failurePolicy Fail would.
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Reason: metav1.StatusReasonInternalError, Message: "allot webhook could not check the change: " + err.Error()}
		w.m.admission.WithLabelValues(kind, admissionError).Inc()
		w.log.Warn("admission check failed", "resource", kind, "name", req.Name, "err", err)
	case len(problems) > 0:
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
			Reason: metav1.StatusReasonInvalid, Message: few(problems, 10)}
		w.m.admission.WithLabelValues(kind, admissionDenied).Inc()
		w.log.Info("admission refused", "resource", kind, "name", req.Name, "operation", req.Operation, "problems", problems)
	default:
		w.m.admission.WithLabelValues(kind, admissionAllowed).Inc()
	}
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = admissionv1.SchemeGroupVersion.String(), "AdmissionReview"
	}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(&out)
}

// judge returns the problems of one request: it decodes the object, reads what the kind's
// rule needs from the API server, and asks the rule (admitConfig, poolProblems,
// subnetProblems, ippoolProblems, validateReservedIP: pure).
func (w *webhookServer) judge(ctx context.Context, req *admissionv1.AdmissionRequest) ([]string, error) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return nil, nil
	}
	switch r := req.Resource.Resource; {
	case r == "clustercidrconfigs" && w.ccc:
		return w.judgeConfig(ctx, req)
	case r == "sharedippools" && w.shared:
		return w.judgeSharedPool(ctx, req)
	case r == "allotsubnets" && w.shared:
		return w.judgeSubnet(ctx, req)
	case r == "ippools":
		return ippoolProblems(w.ippoolMode), nil
	case r == "reservedips" && w.shared:
		var obj allotv1.ReservedIP
		if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
			return []string{"object: " + err.Error()}, nil
		}
		return validateReservedIP(&obj), nil
	}
	return nil, nil
}

func (w *webhookServer) judgeConfig(ctx context.Context, req *admissionv1.AdmissionRequest) ([]string, error) {
	var obj allotv1.ClusterCIDRConfig
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return []string{"object: " + err.Error()}, nil
	}
	// The spec is immutable (CEL): only a create brings a new spec to judge.
	if req.Operation != admissionv1.Create || obj.DeletionTimestamp != nil {
		return nil, nil
	}
	var all allotv1.ClusterCIDRConfigList
	if err := w.c.List(ctx, &all); err != nil {
		return nil, fmt.Errorf("list ClusterCIDRConfigs: %w", err)
	}
	return admitConfig(&obj, all.Items, w.podCIDRs), nil
}

func (w *webhookServer) judgeSharedPool(ctx context.Context, req *admissionv1.AdmissionRequest) ([]string, error) {
	var obj allotv1.SharedIPPool
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return []string{"object: " + err.Error()}, nil
	}
	var old *allotv1.SharedIPPool
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		old = &allotv1.SharedIPPool{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return []string{"oldObject: " + err.Error()}, nil
		}
	}
	if !specChanged(&obj, old) || obj.DeletionTimestamp != nil {
		return nil, nil
	}
	return validatePool(ctx, w.c, &obj, old)
}

func (w *webhookServer) judgeSubnet(ctx context.Context, req *admissionv1.AdmissionRequest) ([]string, error) {
	var obj allotv1.AllotSubnet
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return []string{"object: " + err.Error()}, nil
	}
	var old *allotv1.AllotSubnet
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		old = &allotv1.AllotSubnet{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return []string{"oldObject: " + err.Error()}, nil
		}
		if equality.Semantic.DeepEqual(obj.Spec, old.Spec) {
			return nil, nil
		}
	}
	if obj.DeletionTimestamp != nil {
		return nil, nil
	}
	return validateSubnet(ctx, w.c, &obj, old)
}

// registerLoop registers the webhook, retrying with backoff until it succeeds or ctx ends.
func (w *webhookServer) registerLoop(ctx context.Context) {
	backoff := 500 * time.Millisecond
	for {
		err := w.register(ctx)
		if err == nil {
			w.log.Info("admission webhook registered", "config", w.o.ConfigName)
			return
		}
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("registering the admission webhook failed; retrying", "config", w.o.ConfigName, "err", err, "retryIn", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// desired builds the webhook configuration's webhooks with caBundle bundle.
func (w *webhookServer) desired(bundle []byte) []admissionregv1.ValidatingWebhook {
	o := w.o
	cc := admissionregv1.WebhookClientConfig{CABundle: bundle}
	if o.ServiceName != "" && o.URL == "" {
		path, port := o.Path, o.ServicePort
		cc.Service = &admissionregv1.ServiceReference{Namespace: o.ServiceNamespace, Name: o.ServiceName, Path: &path, Port: &port}
	} else {
		u := o.URL
		cc.URL = &u
	}
	fail := admissionregv1.FailurePolicyType(o.FailurePolicy)
	none := admissionregv1.SideEffectClassNone
	exact := admissionregv1.Exact
	scope := admissionregv1.ClusterScope
	timeout := o.TimeoutSeconds
	hook := func(name, resource string) admissionregv1.ValidatingWebhook {
		return admissionregv1.ValidatingWebhook{
			Name:         name,
			ClientConfig: cc,
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
				Rule: admissionregv1.Rule{APIGroups: []string{allotv1.SchemeGroupVersion.Group}, APIVersions: []string{"*"},
					Resources: []string{resource}, Scope: &scope},
			}},
			FailurePolicy:           &fail,
			MatchPolicy:             &exact,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions: []admissionregv1.MatchCondition{{
				Name:       "spec-changed",
				Expression: "request.operation != 'UPDATE' || object.spec != oldObject.spec",
			}},
		}
	}
	var hooks []admissionregv1.ValidatingWebhook
	if w.shared {
		hooks = append(hooks, hook("sharedippools.allot.io", "sharedippools"), hook("reservedips.allot.io", "reservedips"),
			hook("allotsubnets.allot.io", "allotsubnets"))
	}
	if w.ccc {
		hooks = append(hooks, hook("clustercidrconfigs.allot.io", "clustercidrconfigs"))
	}
	// IPPools go through the webhook only where they would do nothing: in multi-pool mode
	// an operator outage must not block editing them.
	if w.ippoolMode != "" {
		hooks = append(hooks, hook("ippools.allot.io", "ippools"))
	}
	return hooks
}

// register creates or updates the ValidatingWebhookConfiguration.
func (w *webhookServer) register(ctx context.Context) error {
	wc := w.c
	for attempt := 0; attempt < 5; attempt++ {
		var cur admissionregv1.ValidatingWebhookConfiguration
		err := wc.Get(ctx, client.ObjectKey{Name: w.o.ConfigName}, &cur)
		if apierrors.IsNotFound(err) {
			obj := &admissionregv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: w.o.ConfigName, Labels: map[string]string{"app.kubernetes.io/managed-by": "allot-operator"}},
				Webhooks:   w.desired(w.caPEM),
			}
			err = wc.Create(ctx, obj)
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return err
		}
		if err != nil {
			return err
		}
		bundle := w.caPEM
		if w.o.CertDir == "" && len(cur.Webhooks) > 0 {
			bundle = mergeCABundle(cur.Webhooks[0].ClientConfig.CABundle, w.caPEM, time.Now())
		}
		cur.Webhooks = w.desired(bundle)
		err = wc.Update(ctx, &cur)
		if apierrors.IsConflict(err) {
			continue
		}
		return err
	}
	return errors.New("ValidatingWebhookConfiguration kept changing")
}

// mergeCABundle adds ours to a bundle, dropping expired certificates, duplicates of ours and
// all but the newest others (at most maxCABundleCerts in all).
func mergeCABundle(existing, ours []byte, now time.Time) []byte {
	type entry struct {
		der  []byte
		from time.Time
	}
	var others []entry
	rest := existing
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil || now.After(c.NotAfter) {
			continue
		}
		if ob, _ := pem.Decode(ours); ob != nil && bytes.Equal(ob.Bytes, b.Bytes) {
			continue
		}
		others = append(others, entry{der: b.Bytes, from: c.NotBefore})
	}
	slices.SortStableFunc(others, func(a, b entry) int { return b.from.Compare(a.from) })
	if len(others) > maxCABundleCerts-1 {
		others = others[:maxCABundleCerts-1]
	}
	out := slices.Clone(ours)
	for _, e := range others {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.der})...)
	}
	return out
}

// certSource serves the current certificate, re-reading CertDir files when they change.
type certSource struct {
	mu       sync.Mutex
	cert     *tls.Certificate
	certFile string
	keyFile  string
	modTime  time.Time
	checked  time.Time
}

func (s *certSource) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.certFile != "" && time.Since(s.checked) > 10*time.Second {
		s.checked = time.Now()
		if st, err := os.Stat(s.certFile); err == nil && !st.ModTime().Equal(s.modTime) {
			if c, err := tls.LoadX509KeyPair(s.certFile, s.keyFile); err == nil {
				s.cert, s.modTime = &c, st.ModTime()
			}
		}
	}
	return s.cert, nil
}

func loadCertDir(dir string) (*certSource, []byte, error) {
	cf, kf := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, err := tls.LoadX509KeyPair(cf, kf)
	if err != nil {
		return nil, nil, fmt.Errorf("SharedPools.Webhook.CertDir: %w", err)
	}
	st, err := os.Stat(cf)
	if err != nil {
		return nil, nil, err
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		if ca, err = os.ReadFile(cf); err != nil {
			return nil, nil, err
		}
	}
	return &certSource{cert: &c, certFile: cf, keyFile: kf, modTime: st.ModTime(), checked: time.Now()}, ca, nil
}

// generateCerts makes a CA (valid 10 years) and a serving certificate for hosts (1 year; the
// operator restarts long before, and a restart makes new ones).
func generateCerts(hosts []string) (*certSource, []byte, error) {
	now := time.Now().Add(-time.Hour) // clock skew between the operator and the API server
	caTmpl := &x509.Certificate{
		SerialNumber:          certSerial(),
		Subject:               pkix.Name{CommonName: "allot-operator webhook CA " + now.UTC().Format(time.RFC3339)},
		NotBefore:             now,
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caKey, caDER, err := signCert(caTmpl, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: certSerial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now,
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	key, der, err := signCert(tmpl, caCert, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	c, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, nil, err
	}
	return &certSource{cert: &c}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

func certSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// signCert makes a P-256 key and a certificate of tmpl for it, signed by parent's key
// (self-signed when parent is nil).
func signCert(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	return key, der, err
}
