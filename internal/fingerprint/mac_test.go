package fingerprint

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestMACMatchesHMAC checks mac against crypto/hmac over random keys,
// short and longer than a block, and random messages of every length
// around the block boundaries where the padding changes shape.
func TestMACMatchesHMAC(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, keyLen := range []int{MinSecret, 32, 63, 64, 65, 200} {
		key := make([]byte, keyLen)
		for i := range key {
			key[i] = byte(r.Uint32())
		}
		pads := newPads(key)
		if pads == nil {
			t.Fatal("newPads = nil: the fingerprint would fall back to crypto/hmac")
		}
		m := newMAC(pads)
		var buf []byte
		for n := range 400 {
			for range 5 {
				msg := make([]byte, n, n+r.IntN(80))
				for i := range msg {
					msg[i] = byte(r.Uint32())
				}
				ref := hmac.New(sha256.New, key)
				ref.Write(msg)
				want := ref.Sum(nil)
				// Once in a fresh slice, once in the reused buffer, whose
				// bytes past the message hold an earlier padding.
				got, _ := m.sum(bytes.Clone(msg))
				var again [sha256.Size]byte
				again, buf = m.sum(append(buf[:0], msg...))
				if !bytes.Equal(got[:], want) || !bytes.Equal(again[:], want) {
					t.Fatalf("key %d bytes, message %d bytes: mac %x and %x, crypto/hmac %x", keyLen, n, got, again, want)
				}
			}
		}
	}
}

// TestHasherMatchesHMAC checks Sum against crypto/hmac under a secret
// given by SetSecret, as a Pending Hasher gets one.
func TestHasherMatchesHMAC(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	key := make([]byte, 48)
	for i := range key {
		key[i] = byte(r.Uint32())
	}
	h := Pending()
	if err := h.SetSecret(key); err != nil {
		t.Fatal(err)
	}
	if h.pads == nil {
		t.Fatal("SetSecret left no pads: the fingerprint would fall back to crypto/hmac")
	}
	for n := range 300 {
		a := Action{Actor: string(bytes.Repeat([]byte{'a'}, n)), Tool: "t", Arguments: []byte(`{"n":1}`)}
		canon, err := Canonical(a)
		if err != nil {
			t.Fatal(err)
		}
		ref := hmac.New(sha256.New, key)
		ref.Write(canon)
		want := ref.Sum(nil)
		got, err := h.Sum(a)
		if err != nil || got != hex.EncodeToString(want) {
			t.Fatalf("actor of %d bytes: Sum = %s, %v; want %x", n, got, err, want)
		}
	}
}

// TestHasherWithoutPads checks the fallback to crypto/hmac, taken where
// newPads finds crypto/sha256's digests unlike it expects.
func TestHasherWithoutPads(t *testing.T) {
	h := newHasher(t)
	fallback := Pending()
	fallback.key = []byte(testSecret)
	fallback.keyed.Store(true) // and no pads
	for i := range 50 {
		a := base()
		a.Tool += string(bytes.Repeat([]byte{'x'}, i))
		want := sum(t, h, a)
		if got := sum(t, fallback, a); got != want {
			t.Fatalf("tool %q: crypto/hmac gives %s, the Hasher %s", a.Tool, got, want)
		}
	}
}
