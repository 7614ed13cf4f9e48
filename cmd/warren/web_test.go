package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// writeCert writes a self-signed certificate and its key as PEM files.
func writeCert(t *testing.T, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestHTTPSFlags: --https-addr takes --https-cert/--https-key, or the
// AMQPS ones, and refuses to start without a certificate.
func TestHTTPSFlags(t *testing.T) {
	amqpsCert, amqpsKey := writeCert(t, "amqps")
	httpsCert, httpsKey := writeCert(t, "https")
	run := func(args ...string) (*tls.Config, error) {
		var cfg *tls.Config
		var cfgErr error
		app := &cli.App{Flags: serverFlags(), Action: func(cc *cli.Context) error {
			cfg, cfgErr = httpsTLS(cc)
			return nil
		}}
		if err := app.Run(append([]string{"warren"}, args...)); err != nil {
			t.Fatal(err)
		}
		return cfg, cfgErr
	}
	cn := func(cfg *tls.Config) string {
		t.Helper()
		leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
	if cfg, err := run(); cfg != nil || err != nil {
		t.Errorf("no --https-addr: %v, %v", cfg, err)
	}
	if _, err := run("--https-addr", ":0"); err == nil {
		t.Error("--https-addr without a certificate accepted")
	}
	cfg, err := run("--https-addr", ":0", "--https-cert", httpsCert, "--https-key", httpsKey, "--tls-cert", amqpsCert, "--tls-key", amqpsKey)
	if err != nil || cn(cfg) != "https" {
		t.Errorf("https-cert: %v, %v", cfg, err)
	}
	t.Setenv("WARREN_HTTPS_ADDR", ":0")
	cfg, err = run("--tls-cert", amqpsCert, "--tls-key", amqpsKey)
	if err != nil || cn(cfg) != "amqps" {
		t.Errorf("tls-cert fallback: %v, %v", cfg, err)
	}
	if _, err := run("--https-cert", "/nonexistent", "--https-key", "/nonexistent"); err == nil {
		t.Error("missing certificate files accepted")
	}
}
