package fingerprint

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestRecordText writes records one after another through one
// recordText, their strings drawn from a set that repeats some, varies
// others in a byte or in where one string ends and the next begins, and
// holds some that must be escaped, and checks each against the record
// written afresh.
func TestRecordText(t *testing.T) {
	strs := []string{
		"", "a", "b", "ab", "ac", "abc", "s", "u", "charge_card",
		`x","tool":"y`, `q"`, "tab\there", "\x01", "é", "\xff", "\xffa", "a\xff",
		`\`, "\u2028", strings.Repeat("long", 300),
	}
	r := rand.New(rand.NewPCG(5, 6))
	pick := func() string { return strs[r.IntN(len(strs))] }
	var text recordText
	var out []byte
	for i := range 20000 {
		a := Action{Actor: pick(), Scope: pick(), Tool: pick(), Upstream: pick(), Arguments: json.RawMessage(`{"n":1}`)}
		want, err := appendCanonical(nil, &a, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out, err = appendCanonical(out[:0], &a, true, &text); err != nil || !bytes.Equal(out, want) {
			t.Fatalf("record %d, %+v: wrote %s, %v; want %s", i, a, out, err, want)
		}
	}
}

// TestRecordTextFragments is TestRecordText with strings built of bits
// of the record's own text: a string that spells a member boundary must
// never pass for the text kept from another record.
func TestRecordTextFragments(t *testing.T) {
	bits := []string{"a", "b", `"`, `\`, ",", ":", toolText, upstreamText, endText, argsText, "\xff", "é"}
	r := rand.New(rand.NewPCG(7, 8))
	pick := func() string {
		var s string
		for range r.IntN(4) {
			s += bits[r.IntN(len(bits))]
		}
		return s
	}
	var text recordText
	var out []byte
	a := Action{Arguments: json.RawMessage(`{}`)}
	for i := range 200000 {
		// One string changed at a time, as calls differ.
		switch r.IntN(4) {
		case 0:
			a.Actor = pick()
		case 1:
			a.Scope = pick()
		case 2:
			a.Tool = pick()
		case 3:
			a.Upstream = pick()
		}
		want, err := appendCanonical(nil, &a, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out, err = appendCanonical(out[:0], &a, true, &text); err != nil || !bytes.Equal(out, want) {
			t.Fatalf("record %d, %+v: wrote %s, %v; want %s", i, a, out, err, want)
		}
	}
}

// TestRecordTextBoundaries checks records whose strings total the same
// length but split it differently, one after the other.
func TestRecordTextBoundaries(t *testing.T) {
	actions := []Action{
		{Actor: "ab", Scope: "ab", Tool: "c", Upstream: "de"},
		{Actor: "ab", Scope: "a", Tool: "bc", Upstream: "de"},
		{Actor: "ab", Scope: "a", Tool: "b", Upstream: "cde"},
		{Actor: "ab", Scope: "abc", Tool: "", Upstream: "de"},
		{Actor: "ab", Scope: "ab", Tool: "c", Upstream: "de"},
		{Actor: "ab", Scope: "ab", Tool: "c", Upstream: "dé"},
		{Actor: "ab", Scope: "ab", Tool: "c", Upstream: "d\xff"},
		{Actor: "ab", Scope: "ab", Tool: "c", Upstream: "de"},
		{Actor: "ab", Scope: "a", Tool: `"c`, Upstream: "de"}, // the same length and bytes, shifted
		{Actor: "ab", Scope: `q"`, Tool: "", Upstream: ""},
		{Actor: "ab", Scope: `q\`, Tool: "", Upstream: "a"},
	}
	var text recordText
	for i, a := range actions {
		want, err := appendCanonical(nil, &a, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := appendCanonical(nil, &a, true, &text); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("record %d, %+v: wrote %s, %v; want %s", i, a, got, err, want)
		}
	}
}
