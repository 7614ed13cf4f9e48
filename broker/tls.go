package broker

import (
	"crypto/tls"
	"time"

	"go.uber.org/zap"
)

// TLS: Config.TLS and Config.AMQPSAddr add an amqps listener (RabbitMQ's
// port 5671). Only TLS 1.2 and 1.3 are accepted. Client certificates are
// asked for as Config.TLS.ClientAuth says; a connection whose certificate
// verified is offered SASL EXTERNAL, which logs in as the certificate's
// subject common name.

// serverTLSConfig returns cfg restricted to TLS 1.2 and later, or nil.
func serverTLSConfig(cfg *tls.Config) *tls.Config {
	if cfg == nil {
		return nil
	}
	cfg = cfg.Clone()
	if cfg.MinVersion < tls.VersionTLS12 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if cfg.MaxVersion != 0 && cfg.MaxVersion < tls.VersionTLS12 {
		cfg.MaxVersion = tls.VersionTLS12
	}
	return cfg
}

// tlsHandshake runs the TLS handshake of an amqps connection before the
// AMQP protocol header, within the handshake timeout, and notes the common
// name of a verified client certificate for SASL EXTERNAL.
func (c *conn) tlsHandshake() error {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return nil
	}
	_ = tc.SetDeadline(time.Unix(0, c.rd.until.Load()))
	if err := tc.Handshake(); err != nil {
		c.log.Info("TLS handshake failed", zap.Error(err))
		return err
	}
	_ = tc.SetDeadline(time.Time{})
	st := tc.ConnectionState()
	if len(st.VerifiedChains) > 0 && len(st.PeerCertificates) > 0 {
		c.certUser = st.PeerCertificates[0].Subject.CommonName
	}
	return nil
}
