package broker

import (
	"bytes"
	"encoding/binary"

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
	perms   map[string]permission
	storeID uint64
}

// permission is a user's configure, write and read patterns on a vhost.
type permission struct {
	configure, write, read string
	storeID                uint64
}

func (u *user) setPermission(vhost string, p permission) {
	if u.perms == nil {
		u.perms = make(map[string]permission)
	}
	u.perms[vhost] = p
}

// saslMechanisms is what connection.start offers.
const saslMechanisms = "PLAIN AMQPLAIN"

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
