// Package authtest makes what tests of TLS and tokens need: a throwaway CA
// with a server and a client certificate, and a token file.
package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/auth"
)

// Certs are the PEM files NewCerts wrote.
type Certs struct {
	CA                    string // the CA's certificate
	ServerCert, ServerKey string // for localhost, 127.0.0.1 and ::1
	ClientCert, ClientKey string // signed by the CA, for mutual TLS
	OtherCA               string // a CA that signed neither
}

// NewCerts writes a fresh CA, server and client certificate to a temporary
// directory of t.
func NewCerts(t testing.TB) Certs {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCA(t, "harbinger test CA")
	other, _ := newCA(t, "another CA")
	c := Certs{
		CA: filepath.Join(dir, "ca.pem"), OtherCA: filepath.Join(dir, "other-ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	writePEM(t, c.CA, "CERTIFICATE", ca.Raw)
	writePEM(t, c.OtherCA, "CERTIFICATE", other.Raw)
	leaf(t, ca, caKey, "localhost", x509.ExtKeyUsageServerAuth, c.ServerCert, c.ServerKey)
	leaf(t, ca, caKey, "worker", x509.ExtKeyUsageClientAuth, c.ClientCert, c.ClientKey)
	return c
}

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func leaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, usage x509.ExtKeyUsage, certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: []string{name}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certPath, "CERTIFICATE", der)
	writePEM(t, keyPath, "PRIVATE KEY", kder)
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TokenFile writes a token file granting each token (name -> scopes) and
// returns its path and the tokens by name.
func TokenFile(t testing.TB, grants map[string][]string) (path string, tokens map[string]string) {
	t.Helper()
	tokens = map[string]string{}
	var b strings.Builder
	b.WriteString("tokens:\n")
	for name, scopes := range grants {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		var ss []auth.Scope
		for _, s := range scopes {
			sc, err := auth.ParseScope(s)
			if err != nil {
				t.Fatal(err)
			}
			ss = append(ss, sc)
		}
		b.WriteString(auth.FileEntry(name, tok, ss))
		tokens[name] = tok
	}
	path = filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, tokens
}
