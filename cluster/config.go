package cluster

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"

	"go.uber.org/zap"
)

// Config is a node's identity in the cluster and how it reaches its peers.
type Config struct {
	// ClusterID names the cluster; nodes with different ids refuse each
	// other. Default "warren".
	ClusterID string
	// NodeName is this node's name, unique in the cluster. Default
	// warren@<hostname>.
	NodeName string
	// ClusterAddr is the address the cluster port listens on
	// (default ":25672").
	ClusterAddr string
	// Advertise is the address peers dial to reach this node (its Raft
	// server address). Default: the listening address, with the host name
	// when ClusterAddr's host is empty or unspecified.
	Advertise string
	// Join lists seed nodes' cluster addresses (RaftLog.Join asks them to
	// add the node).
	Join []string
	// SecretFile holds the shared cluster secret (as RabbitMQ's Erlang
	// cookie): at least 16 bytes once surrounding white space is trimmed,
	// readable by its owner only. Secret, when set, is used instead.
	SecretFile string
	Secret     []byte
	// TLS, when set, wraps the cluster port in mutual TLS: it must hold the
	// node's certificate (Certificates) and the CAs that sign its peers'
	// (RootCAs, ClientCAs); a peer without a valid certificate is refused.
	// The secret handshake runs inside TLS all the same.
	TLS *tls.Config
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
}

// minSecret is the shortest secret accepted, in bytes.
const minSecret = 16

var (
	// ErrNoSecret is returned by Start when the node has no cluster secret.
	ErrNoSecret = errors.New("cluster: no cluster secret (set a secret file)")
	// ErrWeakSecret is returned by Start for a secret under 16 bytes.
	ErrWeakSecret = errors.New("cluster: cluster secret shorter than 16 bytes")
	// ErrSecretFileMode is returned by Start when the secret file can be
	// read by other users than its owner.
	ErrSecretFileMode = errors.New("cluster: cluster secret file is accessible to other users (want mode 0600 or 0400)")
)

func (c Config) withDefaults() Config {
	if c.ClusterID == "" {
		c.ClusterID = "warren"
	}
	if c.NodeName == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "localhost"
		}
		c.NodeName = "warren@" + host
	}
	if c.ClusterAddr == "" {
		c.ClusterAddr = ":25672"
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

func (c Config) validate() error {
	if len(c.ClusterID) > maxField || len(c.NodeName) > maxField || len(c.Advertise) > maxField {
		return fmt.Errorf("cluster: cluster id, node name and advertised address are limited to %d bytes", maxField)
	}
	return nil
}

// secret returns the configured secret, reading SecretFile when Secret is
// not set.
func (c Config) secret() ([]byte, error) {
	s := c.Secret
	if s == nil && c.SecretFile != "" {
		fi, err := os.Stat(c.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("cluster: secret file: %w", err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%w: %s is %v", ErrSecretFileMode, c.SecretFile, fi.Mode().Perm())
		}
		if s, err = os.ReadFile(c.SecretFile); err != nil {
			return nil, fmt.Errorf("cluster: secret file: %w", err)
		}
	}
	s = bytes.TrimSpace(s)
	switch {
	case len(s) == 0:
		return nil, ErrNoSecret
	case len(s) < minSecret:
		return nil, ErrWeakSecret
	}
	return bytes.Clone(s), nil
}

// advertise returns the address peers reach a node listening on ln at.
func (c Config) advertise(ln net.Addr) string {
	if c.Advertise != "" {
		return c.Advertise
	}
	host, _, _ := net.SplitHostPort(c.ClusterAddr)
	_, port, _ := net.SplitHostPort(ln.String())
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil && h != "" {
			return net.JoinHostPort(h, port)
		}
		return ln.String()
	}
	return net.JoinHostPort(host, port)
}
