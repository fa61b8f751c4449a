package pki

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestIssueAndKubeconfig(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	crtPEM, keyPEM, err := ca.Issue(Request{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}, Client: true,
		DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(crtPEM)
	crt, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if _, err := crt.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: "localhost"}); err != nil {
			t.Errorf("verify for usage %v: %v", usage, err)
		}
	}
	if crt.Subject.CommonName != "system:node:n1" || len(crt.Subject.Organization) != 1 || crt.Subject.Organization[0] != "system:nodes" {
		t.Errorf("subject %v", crt.Subject)
	}
	p := filepath.Join(t.TempDir(), "sub", "kubeconfig")
	if err := WriteKubeconfig(p, "c", "https://127.0.0.1:6443", ca.CertPEM, Credentials{User: "u", CertPEM: crtPEM, KeyPEM: keyPEM}); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || string(cfg.CertData) != string(crtPEM) || string(cfg.CAData) != string(ca.CertPEM) {
		t.Errorf("kubeconfig round trip: %+v", cfg)
	}
	if a, b := Token(), Token(); len(a) != 48 || a == b {
		t.Errorf("tokens %q %q", a, b)
	}
}
