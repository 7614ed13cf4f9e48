package broker

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
)

// user is a broker user. Fields are guarded by Broker.mu.
type user struct {
	name string
	// hash is RabbitMQ's salted password hash made with algorithm.
	hash      []byte
	algorithm string
	tags      []string
	// perms maps a vhost name to the user's permissions there.
	perms map[string]permission
	// topicPerms are the topic permissions (access.go).
	topicPerms map[topicPermKey]topicPermission
	// limits are the user's limits (userlimits.go); nil = none.
	limits  map[string]int64
	storeID uint64
}

// permission is a user's configure, write and read patterns on a vhost.
type permission struct {
	configure, write, read string
	storeID                uint64
	// re holds the compiled patterns, indexed by permKind (access.go).
	re *permPatterns
}

// setPermission stores p, compiling its patterns. Hold Broker.mu (or own u).
func (u *user) setPermission(vhost string, p permission) {
	if u.perms == nil {
		u.perms = make(map[string]permission)
	}
	p.re = compilePermission(p.configure, p.write, p.read)
	u.perms[vhost] = p
}

// saslMechanisms is what connection.start offers; TLS connections with a
// verified client certificate are offered EXTERNAL too.
const saslMechanisms = "PLAIN AMQPLAIN"

// mechanisms is the mechanisms field of connection.start.
func (c *conn) mechanisms() string {
	if c.certUser != "" {
		return saslMechanisms + " EXTERNAL"
	}
	return saslMechanisms
}

// login authenticates the user of connection.start-ok: PLAIN and AMQPLAIN
// with a password, EXTERNAL with the common name of the client's verified
// certificate (the response is ignored, as RabbitMQ ignores it). Then the
// loopback restriction (Config.LoopbackUsers) applies.
func (c *conn) login(startOk *amqp.ConnectionStartOk) (*user, error) {
	mech := startOk.Mechanism
	var u *user
	var username, password string
	switch {
	case mech == "PLAIN" || mech == "AMQPLAIN":
		var err error
		username, password, err = parseSASL(mech, []byte(startOk.Response))
		if err != nil {
			return nil, silent(err)
		}
		u = c.b.authenticate(username, password)
	case mech == "EXTERNAL" && c.certUser != "":
		username = c.certUser
		c.b.mu.Lock()
		u = c.b.users[username]
		c.b.mu.Unlock()
	default:
		return nil, silent(amqp.Errorf(amqp.CommandInvalid, amqp.ClassConnection, 11,
			"unknown authentication mechanism '%s'", mech))
	}
	if u == nil && (mech == "PLAIN" || mech == "AMQPLAIN") && c.b.syncDefinitions() {
		// A user added, or a password changed, through another node
		// a moment ago.
		u = c.b.authenticate(username, password)
	}
	if u == nil {
		return nil, c.loginRefused(mech, "user '%s' - invalid credentials", username)
	}
	if c.b.loopbackOnly(u.name, c.nc.RemoteAddr()) {
		return nil, c.loginRefused(mech, "user '%s' can only connect via localhost", u.name)
	}
	return u, nil
}

// loginRefused is RabbitMQ's auth_fail: a client with the
// authentication_failure_close capability gets connection.close 403 with a
// safe text, others a closed socket; the log has the reason.
func (c *conn) loginRefused(mech, format string, args ...any) error {
	reason := fmt.Sprintf(format, args...)
	c.log.Info("authentication failed", zap.String("reason", reason), zap.String("mechanism", mech))
	if c.capAuthFailure {
		return amqp.Errorf(amqp.AccessRefused, 0, 0,
			"Login was refused using authentication mechanism %s. For details see the broker logfile.", mech)
	}
	return silent(amqp.Errorf(amqp.AccessRefused, amqp.ClassConnection, 11, "%s login refused: %s", mech, reason))
}

// parseSASL extracts the username and password from a connection.start-ok
// response for the PLAIN or AMQPLAIN mechanism. A malformed response is a
// 502 SYNTAX_ERROR, as in RabbitMQ.
func parseSASL(mechanism string, response []byte) (username, password string, err error) {
	switch mechanism {
	case "PLAIN":
		// RFC 4616: [authzid] NUL authcid NUL passwd
		parts := bytes.Split(response, []byte{0})
		if len(parts) != 3 {
			return "", "", amqp.Errorf(amqp.SyntaxError, amqp.ClassConnection, 11, "response %q invalid", response)
		}
		return string(parts[1]), string(parts[2]), nil
	case "AMQPLAIN":
		// A field table without its leading length (clients differ: accept both).
		t, err := decodeBareTable(response)
		if err == nil {
			u, uok := t["LOGIN"].(string)
			p, pok := t["PASSWORD"].(string)
			if uok && pok {
				return u, p, nil
			}
		}
		return "", "", amqp.Errorf(amqp.SyntaxError, amqp.ClassConnection, 11,
			"AMQPLAIN auth info is missing LOGIN or PASSWORD field")
	}
	return "", "", amqp.Errorf(amqp.CommandInvalid, amqp.ClassConnection, 11, "unknown authentication mechanism '%s'", mechanism)
}

func decodeBareTable(b []byte) (amqp.Table, error) {
	framed := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(framed, uint32(len(b)))
	copy(framed[4:], b)
	t, _, err := amqp.DecodeTable(framed)
	if err == nil {
		return t, nil
	}
	t, _, err2 := amqp.DecodeTable(b)
	if err2 == nil {
		return t, nil
	}
	return nil, err
}

// authenticate checks a username and password.
func (b *Broker) authenticate(username, password string) *user {
	b.mu.Lock()
	u := b.users[username]
	var algorithm string
	var hash []byte
	if u != nil {
		algorithm, hash = u.algorithm, u.hash
	}
	b.mu.Unlock()
	if u == nil {
		return nil
	}
	if !CheckPassword(algorithm, hash, password) {
		return nil
	}
	return u
}
