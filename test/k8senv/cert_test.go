package k8senv

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"
)

// BenchmarkServingHandshake is a TLS handshake of a new client with a server presenting the
// harness's ECDSA P-256 certificate, and with an RSA-2048 one as kube-apiserver generates
// in --cert-dir: what each agent's connection costs the API server (and its client).
func BenchmarkServingHandshake(b *testing.B) {
	certFile, keyFile, err := writeServingCert(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	ec, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ecdsa-p256", func(b *testing.B) { benchHandshake(b, ec) })
	b.Run("rsa-2048", func(b *testing.B) { benchHandshake(b, rsaCert(b)) })
}

func rsaCert(b *testing.B) tls.Certificate {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rsa"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func benchHandshake(b *testing.B, cert tls.Certificate) {
	srvCfg := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	for b.Loop() {
		c, s := net.Pipe()
		done := make(chan error, 1)
		go func() { done <- tls.Server(s, srvCfg).Handshake() }()
		cl := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec // benchmark
		if err := cl.Handshake(); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		_ = c.Close()
		_ = s.Close()
	}
}
