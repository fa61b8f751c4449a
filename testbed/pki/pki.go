// Package pki generates the testbed's certificates, keys, tokens and
// kubeconfigs. Everything is ECDSA P-256 and made fresh for each testbed.
package pki

import (
	"crypto"
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

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// validity of every certificate the testbed makes.
const validity = 10 * 365 * 24 * time.Hour

// CA is a certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// NewCA makes a self-signed CA.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: ca key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: ca certificate: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

// Request describes a certificate to issue.
type Request struct {
	CommonName    string
	Organizations []string
	DNSNames      []string
	IPs           []net.IP
	Server        bool // serverAuth usage
	Client        bool // clientAuth usage
}

// Issue signs a new key pair. It returns the certificate and key in PEM.
func (ca *CA) Issue(r Request) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: key for %s: %w", r.CommonName, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: r.CommonName, Organization: r.Organizations},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     r.DNSNames,
		IPAddresses:  r.IPs,
	}
	if r.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if r.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: certificate for %s: %w", r.CommonName, err)
	}
	keyPEM, err = KeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// KeyPEM encodes a private key as PKCS #8 PEM.
func KeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// NewKeyPair makes a key pair (for service account token signing) and
// returns the public key and the private key in PEM.
func NewKeyPair() (pubPEM, privPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: key pair: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("pki: encode public key: %w", err)
	}
	priv, err := KeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), priv, nil
}

// Token returns a random bearer token.
func Token() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Credentials are how a kubeconfig's user authenticates: a client
// certificate, or a bearer token.
type Credentials struct {
	User            string
	CertPEM, KeyPEM []byte
	Token           string
}

// WriteKubeconfig writes a kubeconfig with one cluster, user and context.
func WriteKubeconfig(path, cluster, server string, caPEM []byte, cred Credentials) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[cred.User] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cred.CertPEM,
		ClientKeyData:         cred.KeyPEM,
		Token:                 cred.Token,
	}
	cfg.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: cred.User}
	cfg.CurrentContext = cluster
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("pki: kubeconfig: %w", err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("pki: kubeconfig %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}

// WriteFile writes data to dir/name with mode 0600 (0644 for certificates
// and public keys, which are not secret).
func WriteFile(dir, name string, data []byte, secret bool) (string, error) {
	mode := os.FileMode(0o644)
	if secret {
		mode = 0o600
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, mode); err != nil {
		return "", fmt.Errorf("pki: %w", err)
	}
	return p, nil
}
