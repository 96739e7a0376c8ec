package fingerprint

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"hash"
)

// A mac computes HMAC-SHA-256 (RFC 2104) under one key on two SHA-256
// digests, restoring each to its state after the key's pad, as
// crypto/hmac does, but writing the message's padding itself: each digest
// then takes whole blocks in a single Write, and its result is read from
// its marshaled state. crypto/hmac's Sum copies each digest and writes
// the padding through a second Write, and the inner digest's blocks went
// to SHA-256's block function in two calls: about 650 instructions a
// fingerprint more. TestMACMatchesHMAC checks the two agree.
type mac struct {
	inner, outer   hash.Hash
	innerU, outerU encoding.BinaryUnmarshaler
	innerA, outerA encoding.BinaryAppender
	pads           *macPads
	block          [sha256.BlockSize]byte // the outer message: the inner sum, padded
	state          [marshaledSize]byte    // a digest's marshaled state, read back
}

// macPads holds the marshaled states of SHA-256 after the key's inner
// and outer pads, shared by a Hasher's macs and never written.
type macPads struct {
	inner, outer []byte
}

// The marshaled state of crypto/sha256's digest: a magic, the eight
// words of the chaining state in big-endian order (after whole blocks,
// the digest itself), the partial block, the length.
const (
	marshalMagic  = "sha\x03"
	marshaledSize = len(marshalMagic) + sha256.Size + sha256.BlockSize + 8
)

// newPads returns key's pads, or nil if the digests crypto/sha256 makes
// cannot be marshaled as newMAC needs or do not give crypto/hmac's sums
// that way: the Hasher then uses crypto/hmac.
func newPads(key []byte) *macPads {
	var k [sha256.BlockSize]byte
	if len(key) > len(k) {
		s := sha256.Sum256(key) // RFC 2104: a long key is hashed first
		copy(k[:], s[:])
	} else {
		copy(k[:], key)
	}
	p := &macPads{}
	for i, pad := range []byte{0x36, 0x5c} {
		d := sha256.New()
		var b [sha256.BlockSize]byte
		for j := range b {
			b[j] = k[j] ^ pad
		}
		d.Write(b[:])
		m, ok := d.(encoding.BinaryMarshaler)
		if !ok {
			return nil
		}
		st, err := m.MarshalBinary()
		if err != nil {
			return nil
		}
		if i == 0 {
			p.inner = st
		} else {
			p.outer = st
		}
	}
	m := newMAC(p)
	if m == nil {
		return nil
	}
	// Known answers, one for each way the padding can fall: a layout of
	// the marshaled state other than the one read here shows as a
	// mismatch.
	for _, n := range []int{0, 1, 55, 56, 63, 64, 119, 120, 200} {
		msg := bytes.Repeat([]byte{byte(n)}, n)
		ref := hmac.New(sha256.New, key)
		ref.Write(msg)
		if got, _ := m.sum(msg); !bytes.Equal(got[:], ref.Sum(nil)) {
			return nil
		}
	}
	return p
}

// newMAC returns a mac on pads, or nil if crypto/sha256's digests cannot
// be marshaled as it needs.
func newMAC(pads *macPads) *mac {
	m := &mac{inner: sha256.New(), outer: sha256.New(), pads: pads}
	var ok1, ok2, ok3, ok4 bool
	m.innerU, ok1 = m.inner.(encoding.BinaryUnmarshaler)
	m.outerU, ok2 = m.outer.(encoding.BinaryUnmarshaler)
	m.innerA, ok3 = m.inner.(encoding.BinaryAppender)
	m.outerA, ok4 = m.outer.(encoding.BinaryAppender)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil
	}
	// The outer message is always the 32 bytes of the inner sum after
	// the outer pad's block: its padding never changes.
	m.block[sha256.Size] = 0x80
	binary.BigEndian.PutUint64(m.block[sha256.BlockSize-8:], (sha256.BlockSize+sha256.Size)*8)
	return m
}

// sum returns the HMAC of msg, which it pads in place, and msg padded, to
// reuse: its bytes past len(msg) are written, its array replaced if too
// small. The digests' last blocks are never partial, so no byte of msg is
// copied into them.
func (m *mac) sum(msg []byte) (_ [sha256.Size]byte, padded []byte) {
	if m.innerU.UnmarshalBinary(m.pads.inner) != nil {
		panic("fingerprint: restoring the inner pad's state failed")
	}
	padded = appendPadding(msg, sha256.BlockSize+len(msg))
	m.inner.Write(padded)
	copy(m.block[:sha256.Size], m.chaining(m.innerA))
	if m.outerU.UnmarshalBinary(m.pads.outer) != nil {
		panic("fingerprint: restoring the outer pad's state failed")
	}
	m.outer.Write(m.block[:])
	return [sha256.Size]byte(m.chaining(m.outerA)), padded
}

// chaining returns a digest's chaining state, read from its marshaled
// state: after whole blocks, its sum.
func (m *mac) chaining(a encoding.BinaryAppender) []byte {
	st, err := a.AppendBinary(m.state[:0])
	if err != nil || len(st) != marshaledSize || string(st[:len(marshalMagic)]) != marshalMagic {
		panic("fingerprint: a SHA-256 state is not as expected")
	}
	return st[len(marshalMagic) : len(marshalMagic)+sha256.Size]
}

// appendPadding appends SHA-256's padding for a message of n bytes, of
// which b holds the end: a one bit, zeros up to 56 bytes past a block's
// start, and n in bits.
func appendPadding(b []byte, n int) []byte {
	zeros := uint(sha256.BlockSize-8-1-n) % sha256.BlockSize
	b = append(b, 0x80)
	b = append(b, make([]byte, zeros)...)
	return binary.BigEndian.AppendUint64(b, uint64(n)*8)
}
