package web

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/warrenmq/warren/broker/brokertest"
)

// selfSigned makes a certificate for 127.0.0.1 valid for validFor.
func selfSigned(t *testing.T, validFor time.Duration) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "warren-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validFor),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestHTTPS: with HTTPSAddr and a certificate, the management API is
// served over TLS beside HTTP, listed among the listeners, and checked by
// certificate-expiration.
func TestHTTPS(t *testing.T) {
	bs := brokertest.Start(t, nil)
	if _, err := New(Config{HTTPSAddr: "127.0.0.1:0"}, bs.Broker); err == nil {
		t.Error("HTTPSAddr without a certificate accepted")
	}
	cert, pool := selfSigned(t, 40*24*time.Hour)
	s, err := New(Config{
		Addr: "127.0.0.1:0", MetricsAddr: "-", HTTPSAddr: "127.0.0.1:0",
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}}, Logger: zaptest.NewLogger(t),
	}, bs.Broker)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(path string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+s.HTTPSAddr().String()+path, nil)
		req.SetBasicAuth("guest", "guest")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.TLS == nil {
			t.Fatal("not TLS")
		}
		var m map[string]any
		_ = json.NewDecoder(res.Body).Decode(&m)
		return res.StatusCode, m
	}
	st, o := get("/api/overview")
	if st != 200 {
		t.Fatalf("overview over HTTPS: %d", st)
	}
	_, port, _ := net.SplitHostPort(s.HTTPSAddr().String())
	found := false
	for _, l := range o["listeners"].([]any) {
		l := l.(map[string]any)
		if l["protocol"] == "https" && strconv.Itoa(int(l["port"].(float64))) == port {
			found = true
		}
	}
	if !found {
		t.Errorf("no https listener in %v", o["listeners"])
	}
	// Plain HTTP goes on.
	res, err := http.Get("http://" + s.Addr().String() + "/api/overview")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Errorf("HTTP without credentials: %d", res.StatusCode)
	}
	if st, _ := get("/api/health/checks/protocol-listener/https"); st != 200 {
		t.Errorf("protocol-listener/https: %d", st)
	}
	if st, _ := get("/api/health/checks/port-listener/" + port); st != 200 {
		t.Errorf("port-listener/%s: %d", port, st)
	}
	// The certificate expires in 40 days: within 1 month it does not, within 2 it does.
	if st, m := get("/api/health/checks/certificate-expiration/1/months"); st != 200 {
		t.Errorf("expiration within 1 month: %d %v", st, m)
	}
	st, m := get("/api/health/checks/certificate-expiration/2/months")
	exp, _ := m["expired"].([]any)
	if st != 503 || m["reason"] != "Certificates expiring" || len(exp) != 1 || exp[0].(map[string]any)["protocol"] != "https" {
		t.Errorf("expiration within 2 months: %d %v", st, m)
	}
}
