package fingerprint

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

// TestExactPathKeepsRefusals: a value that takes the exact-number
// path (it holds a number a double does not hold exactly, or a reserved
// key) must still refuse what Sum refuses without it (TestErrors):
// duplicate members, invalid UTF-8, lone surrogates. exactNumbers decodes
// with encoding/json, which keeps the last duplicate and turns both into
// U+FFFD, and jcs then sees the re-marshalled value, not the caller's.
func TestExactPathKeepsRefusals(t *testing.T) {
	h := newHasher(t)
	for _, args := range []string{
		`{"a":1,"a":2,"n":12345678901234567}`,
		`{"a":{"x":1,"x":2},"n":0.1e400}`,
		`{"a":1,"\u0061":2,"mcp-idempotent/decimal":"x"}`,
		"{\"a\":\"\xff\",\"n\":12345678901234567}",
		`{"a":"\ud800","n":12345678901234567}`,
	} {
		if s, err := h.Sum(withArgs(args)); err == nil {
			t.Errorf("Sum(%s) = %.16s, want an error, as without the large number", args, s)
		}
	}
}

// TestExactPathCollisions: the consequence. Calls an upstream reads
// as different actions (a first-wins parser reads "to":"alice"; JS and
// Python keep \ud800 and \udbff apart) share one fingerprint.
func TestExactPathCollisions(t *testing.T) {
	h := newHasher(t)
	for _, pair := range [][2]string{
		{`{"to":"alice","to":"mallory","amount":12345678901234567}`, `{"to":"mallory","amount":12345678901234567}`},
		{`{"memo":"\ud800","amount":12345678901234567}`, `{"memo":"\udbff","amount":12345678901234567}`},
	} {
		a, aerr := h.Sum(withArgs(pair[0]))
		b, berr := h.Sum(withArgs(pair[1]))
		if aerr == nil && berr == nil && a == b {
			t.Errorf("%s and %s share fingerprint %.16s", pair[0], pair[1], a)
		}
	}
}

// TestSimpleLeavesLargeObjectsToTheGeneralPath: appendSimple sorts an
// object's members by insertion, whose work grows with the square of
// their number; past maxSimpleMembers it leaves the object to jcs, which
// sorts in n log n, and the fingerprint is the same either way.
func TestSimpleLeavesLargeObjectsToTheGeneralPath(t *testing.T) {
	for n, want := range map[int]bool{maxSimpleMembers: true, maxSimpleMembers + 1: false} {
		var b strings.Builder
		b.WriteByte('{')
		for i := n; i > 0; i-- {
			if i < n {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%04d":0`, i)
		}
		b.WriteByte('}')
		if _, ok := appendSimple(nil, json.RawMessage(b.String())); ok != want {
			t.Errorf("appendSimple of %d members: ok %v; want %v", n, ok, want)
		}
		got, err := canonicalValue(json.RawMessage(b.String()))
		want, _ := jcs.Transform([]byte(b.String()))
		if err != nil || string(got) != string(want) {
			t.Errorf("%d members: canonical form %.40s..., %v; want jcs's", n, got, err)
		}
	}
}
