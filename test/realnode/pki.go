package realnode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's certificate authority, the API server's serving certificate, the
// service-account key pair and one bearer token per component. Made in Go (no openssl):
// a real CA, so that a pod's mounted ca.crt verifies the API server.
type pki struct {
	dir                     string
	caPEM                   []byte
	servingCert, servingKey string
	saPub, saKey            string
	tokens                  map[string]string // component -> token
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir, tokens: map[string]string{}}
	now := time.Now().Add(-time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "allot-realnode-ca"},
		NotBefore: now, NotAfter: now.Add(10 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now, NotAfter: now.Add(10 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceVIP)},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"ca.crt": p.caPEM, "apiserver.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})}
	for name, k := range map[string]*ecdsa.PrivateKey{"apiserver.key": srvKey, "sa.key": saKey} {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, err
		}
		files[name] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files["sa.pub"] = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	// One identity per component; the bootstrap RBAC policy already binds these users.
	users := []struct{ name, user, uid, groups string }{
		{"admin", "admin", "admin", "system:masters"},
		{"kcm", "system:kube-controller-manager", "kcm", ""},
		{"scheduler", "system:kube-scheduler", "scheduler", ""},
		{"kubelet", "system:node:" + NodeName, "node-" + NodeName, "system:nodes"},
	}
	var csv []byte
	for _, u := range users {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		tok := hex.EncodeToString(b[:])
		p.tokens[u.name] = tok
		line := fmt.Sprintf("%s,%s,%s", tok, u.user, u.uid)
		if u.groups != "" {
			line += fmt.Sprintf(",%q", u.groups)
		}
		csv = append(csv, line+"\n"...)
	}
	files["tokens.csv"] = csv
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	p.servingCert, p.servingKey = filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")
	p.saPub, p.saKey = filepath.Join(dir, "sa.pub"), filepath.Join(dir, "sa.key")
	return p, nil
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// kubeconfig writes a kubeconfig for component with the CA and its token.
func (p *pki) kubeconfig(component string, port int) (string, error) {
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: realnode
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: realnode
  context: {cluster: realnode, user: %s}
current-context: realnode
`, port, b64(p.caPEM), component, p.tokens[component], component)
	path := filepath.Join(p.dir, component+".kubeconfig")
	return path, os.WriteFile(path, []byte(kc), 0o600)
}
