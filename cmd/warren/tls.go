package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// loadTLS builds the amqps listener's TLS configuration from PEM files:
// the server certificate and key, and the CA that signs client
// certificates. verify is none, optional (verify a certificate when the
// client sends one) or required.
func loadTLS(certFile, keyFile, caFile, verify string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("amqps needs --tls-cert and --tls-key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	switch verify {
	case "", "none":
		cfg.ClientAuth = tls.NoClientCert
	case "optional":
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case "required":
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("--tls-verify %q: want none, optional or required", verify)
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA %s: no PEM certificate found", caFile)
		}
		cfg.ClientCAs = pool
	} else if cfg.ClientAuth != tls.NoClientCert {
		return nil, errors.New("--tls-verify optional or required needs --tls-ca")
	}
	return cfg, nil
}
