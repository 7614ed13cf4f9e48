package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// testCA is a certificate authority for TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return testCA{cert, key, pool}
}

// tlsConfig returns a node's mutual-TLS config: a certificate for 127.0.0.1
// signed by ca, trusting trust.
func (ca testCA) tlsConfig(t *testing.T, trust testCA) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs: trust.pool, ClientCAs: trust.pool, MinVersion: tls.VersionTLS13}
}

// TestClusterMutualTLS connects two nodes whose certificates the same CA
// signed, and refuses a node (with the right secret) whose certificate
// another CA signed.
func TestClusterMutualTLS(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the nodes' cleanups
	secret := writeSecret(t, "0123456789abcdef-cluster-secret")
	ca, other := newTestCA(t), newTestCA(t)
	start := func(name string, cfg *tls.Config) (*Node, *observer.ObservedLogs) {
		core, logs := observer.New(zap.InfoLevel)
		n, err := New(Config{ClusterID: "test", NodeName: name, ClusterAddr: "127.0.0.1:0", SecretFile: secret, TLS: cfg, Logger: zap.New(core)})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n, logs
	}
	a, alogs := start("a@test", ca.tlsConfig(t, ca))
	b, _ := start("b@test", ca.tlsConfig(t, ca))
	stranger, _ := start("c@test", other.tlsConfig(t, ca)) // trusts a, but a does not trust it
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if name, err := b.Connect(ctx, a.Addr()); err != nil || name != "a@test" {
		t.Fatalf("connect over mutual TLS: %q %v", name, err)
	}
	if _, err := stranger.Connect(ctx, a.Addr()); err == nil {
		t.Fatal("a node with a certificate of another CA connected")
	}
	waitFor(t, "a to log the refusal", func() bool {
		for _, e := range alogs.FilterMessage("refused cluster peer").All() {
			if strings.Contains(e.ContextMap()["reason"].(string), "TLS") {
				return true
			}
		}
		return false
	})
	// a registers b once its side of the handshake is done, which may be
	// after b has read a's answer; the stranger must never be listed.
	waitFor(t, "a to list b as its peer", func() bool { return slices.Contains(a.Peers(), "b@test") })
	if peers := a.Peers(); len(peers) != 1 || peers[0] != "b@test" {
		t.Fatalf("a's peers %v, want [b@test]", peers)
	}
}
