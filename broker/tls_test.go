package broker_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate.
type testPKI struct {
	pool   *x509.CertPool
	server tls.Certificate
	client tls.Certificate
}

func newTestPKI(t *testing.T, clientCN string) *testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "warren test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	p := &testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.server = issue(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	p.client = issue(3, clientCN, x509.ExtKeyUsageClientAuth, nil)
	return p
}

func (p *testPKI) serverConfig(auth tls.ClientAuthType) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool, ClientAuth: auth}
}

func (p *testPKI) clientConfig(withCert bool) *tls.Config {
	c := &tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1"}
	if withCert {
		c.Certificates = []tls.Certificate{p.client}
	}
	return c
}

func TestTLSPlainLogin(t *testing.T) {
	pki := newTestPKI(t, "alice")
	s := brokertest.Start(t, &broker.Config{TLS: pki.serverConfig(tls.NoClientCert)})
	c, err := amqp091.DialTLS(fmt.Sprintf("amqps://guest:guest@%s/", s.TLSAddr), pki.clientConfig(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	publishConsume(t, c)
	// The plain listener still works beside it.
	publishConsume(t, dial(t, s))
}

func TestTLSOldVersionRefused(t *testing.T) {
	pki := newTestPKI(t, "alice")
	s := brokertest.Start(t, &broker.Config{TLS: pki.serverConfig(tls.NoClientCert)})
	cfg := pki.clientConfig(false)
	cfg.MaxVersion = tls.VersionTLS11
	if _, err := amqp091.DialTLS(fmt.Sprintf("amqps://guest:guest@%s/", s.TLSAddr), cfg); err == nil {
		t.Fatal("TLS 1.1 accepted")
	}
}

func TestTLSRequiredClientCertificate(t *testing.T) {
	pki := newTestPKI(t, "alice")
	s := brokertest.Start(t, &broker.Config{TLS: pki.serverConfig(tls.RequireAndVerifyClientCert)})
	url := fmt.Sprintf("amqps://guest:guest@%s/", s.TLSAddr)
	if c, err := amqp091.DialTLS(url, pki.clientConfig(false)); err == nil {
		_ = c.Close()
		t.Fatal("connected without a client certificate")
	}
	c, err := amqp091.DialTLS(url, pki.clientConfig(true))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
}

func TestTLSExternalAuth(t *testing.T) {
	pki := newTestPKI(t, "alice")
	s := brokertest.Start(t, &broker.Config{TLS: pki.serverConfig(tls.VerifyClientCertIfGiven)})
	url := fmt.Sprintf("amqps://%s/", s.TLSAddr)
	// No user alice yet: refused.
	if c, err := amqp091.DialTLS_ExternalAuth(url, pki.clientConfig(true)); err == nil {
		_ = c.Close()
		t.Fatal("EXTERNAL login of an unknown user accepted")
	}
	if err := s.PutUserHash("alice", nil, "", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPermissions("alice", "/", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	c, err := amqp091.DialTLS_ExternalAuth(url, pki.clientConfig(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	publishConsume(t, c)
	// Without a client certificate EXTERNAL is not offered.
	if c, err := amqp091.DialTLS_ExternalAuth(url, pki.clientConfig(false)); err == nil {
		_ = c.Close()
		t.Fatal("EXTERNAL without a certificate accepted")
	}
}

func TestTLSMechanismsOffered(t *testing.T) {
	s := brokertest.Start(t, nil)
	r := rawDial(t, s.Addr)
	r.write(amqp.ProtocolHeader)
	start := rawExpect[*amqp.ConnectionStart](r, 0)
	if strings.Contains(start.Mechanisms, "EXTERNAL") {
		t.Fatalf("plain connection offered %q", start.Mechanisms)
	}
}
