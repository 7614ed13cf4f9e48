package broker

import "testing"

func TestPasswordHash(t *testing.T) {
	for _, alg := range []string{HashSHA256, HashSHA512} {
		h, err := HashPassword(alg, "s3cret")
		if err != nil {
			t.Fatal(err)
		}
		if !CheckPassword(alg, h, "s3cret") {
			t.Fatalf("%s: right password refused", alg)
		}
		if CheckPassword(alg, h, "S3cret") {
			t.Fatalf("%s: wrong password accepted", alg)
		}
		back, err := DecodePasswordHash(EncodePasswordHash(h))
		if err != nil || !CheckPassword(alg, back, "s3cret") {
			t.Fatalf("%s: base64 round trip failed: %v", alg, err)
		}
	}
}

// TestPasswordHashRabbitMQVector checks a hash computed independently (with
// Python's hashlib) the way RabbitMQ computes it:
// base64(salt ‖ sha256(salt ‖ "guest")) with salt 0x908DC60A.
func TestPasswordHashRabbitMQVector(t *testing.T) {
	salted, err := DecodePasswordHash("kI3GCrswBLNZQzHJJ95QLoyfAVooYhnvf7jbqiW9BjOYUloe")
	if err != nil {
		t.Fatal(err)
	}
	if !CheckPassword(HashSHA256, salted, "guest") {
		t.Fatal("RabbitMQ's hash of guest not accepted")
	}
}
