package statusapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files of the endpoint's state directory. Jobs keep the CA and credential
// they were given at submission for their whole life, so both outlive a
// restart of the agent: they are made once and read after.
const (
	keyFile    = "credential.key"
	caCertFile = "ca.crt"
	caKeyFile  = "ca.key"
	// caValidity covers any job a CA made today could still be running.
	caValidity = 10 * 365 * 24 * time.Hour
)

// State is what the endpoint keeps across restarts: the key its job
// credentials are signed with and its CA.
type State struct {
	Key    []byte
	CAPEM  []byte
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	served tls.Certificate
}

// LoadOrCreateState reads the state in dir, making what is missing (files
// 0600 in a 0700 directory), and issues a serving certificate for hosts
// (DNS names or IP addresses) under the CA.
func LoadOrCreateState(dir string, hosts []string) (*State, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &State{}
	var err error
	if s.Key, err = loadOrCreate(filepath.Join(dir, keyFile), newKey); err != nil {
		return nil, err
	}
	caKeyPEM, err := loadOrCreate(filepath.Join(dir, caKeyFile), newECKeyPEM)
	if err != nil {
		return nil, err
	}
	if s.caKey, err = parseECKey(caKeyPEM); err != nil {
		return nil, fmt.Errorf("%s: %w", caKeyFile, err)
	}
	if s.CAPEM, err = loadOrCreate(filepath.Join(dir, caCertFile), func() ([]byte, error) { return newCAPEM(s.caKey) }); err != nil {
		return nil, err
	}
	block, _ := pem.Decode(s.CAPEM)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM certificate", caCertFile)
	}
	if s.ca, err = x509.ParseCertificate(block.Bytes); err != nil {
		return nil, fmt.Errorf("%s: %w", caCertFile, err)
	}
	if s.served, err = s.issue(hosts); err != nil {
		return nil, err
	}
	return s, nil
}

// TLSConfig serves the certificate issued at load.
func (s *State) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{s.served}}
}

func (s *State) issue(hosts []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "trainyard-agent-status"},
		NotBefore: now.Add(-time.Hour), NotAfter: s.ca.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, &key.PublicKey, s.caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// loadOrCreate reads path, or writes what make gives there (0600) first.
func loadOrCreate(path string, make func() ([]byte, error)) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	if b, err = make(); err != nil {
		return nil, err
	}
	// O_EXCL: a second replica that lost the race reads the winner's.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	return b, f.Close()
}

func newKey() ([]byte, error) {
	k := make([]byte, MinKeyBytes)
	_, err := rand.Read(k)
	return k, err
}

func newECKeyPEM() ([]byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func parseECKey(p []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(p)
	if block == nil {
		return nil, errors.New("no PEM key")
	}
	return x509.ParseECPrivateKey(block.Bytes)
}

func newCAPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "trainyard-agent-status-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caValidity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
