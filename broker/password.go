package broker

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"hash"
)

// Password hashing algorithms, named as RabbitMQ names them in
// definitions files.
const (
	HashSHA256 = "rabbit_password_hashing_sha256"
	HashSHA512 = "rabbit_password_hashing_sha512"
	HashMD5    = "rabbit_password_hashing_md5"
)

// ErrUnknownHashAlgorithm is returned for a hashing algorithm Warren does
// not implement.
var ErrUnknownHashAlgorithm = errors.New("broker: unknown password hashing algorithm")

// HashPassword returns RabbitMQ's salted hash of password: a random 4-byte
// salt followed by H(salt ‖ password), the form definitions carry base64
// encoded as password_hash.
func HashPassword(algorithm, password string) ([]byte, error) {
	var salt [4]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return nil, err
	}
	return hashWithSalt(algorithm, salt[:], password)
}

func hashWithSalt(algorithm string, salt []byte, password string) ([]byte, error) {
	var h hash.Hash
	switch algorithm {
	case HashSHA256, "":
		h = sha256.New()
	case HashSHA512:
		h = sha512.New()
	default:
		return nil, ErrUnknownHashAlgorithm
	}
	h.Write(salt)
	h.Write([]byte(password))
	return h.Sum(append([]byte(nil), salt...)), nil
}

// CheckPassword reports whether password matches a salted hash made by
// HashPassword (or by RabbitMQ) with algorithm.
func CheckPassword(algorithm string, salted []byte, password string) bool {
	if len(salted) < 5 {
		return false
	}
	want, err := hashWithSalt(algorithm, salted[:4], password)
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare(want, salted) == 1
}

// EncodePasswordHash and DecodePasswordHash convert between a salted hash
// and the base64 text of a definitions file.
func EncodePasswordHash(salted []byte) string { return base64.StdEncoding.EncodeToString(salted) }

// DecodePasswordHash decodes the password_hash of a definitions file.
func DecodePasswordHash(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
