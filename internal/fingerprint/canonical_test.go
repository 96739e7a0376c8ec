package fingerprint

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gowebpki/jcs"
)

// jcsWhole is the reference: the whole record through jcs.Transform.
func jcsWhole(a Action) ([]byte, error) {
	args := bytes.TrimSpace(a.Arguments)
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	args, err := exactNumbers(args)
	if err != nil {
		return nil, err
	}
	rec := map[string]any{"actor": a.Actor, "scope": a.Scope, "upstream": a.Upstream, "tool": a.Tool, "arguments": json.RawMessage(args)}
	for k, v := range a.Extra {
		if v != nil {
			ev, err := exactNumbers(v)
			if err != nil {
				return nil, err
			}
			rec[k] = json.RawMessage(ev)
		}
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(raw)
}

var (
	fuzzKey    = []byte("a fixed secret for the fuzz tests")
	fuzzHasher = withKey(fuzzKey)
)

// FuzzCanonical checks that Canonical, which writes the record's own
// members itself, gives exactly what jcs.Transform gives for the whole
// record.
func FuzzCanonical(f *testing.F) {
	f.Add("alice", "session:01K", "stdio:node server.js", "charge_card", `{"card":"4242","amount":100}`, "task", `true`)
	f.Add("bob\u2028", "s\x01\"\\/", "stdio:\"quoted arg\" \t\n", "tööl", `{"b":[1,2.50,1e2],"a":{"\u00e9":null}}`, "inputResponses", `{"r":{"n":12345678901234567}}`)
	f.Add("\xff\xfe", "", "", "x", `{}`, "😀", `"v"`)
	f.Add("a", "b", "c", "d", `{"\ud83d\ude00":1,"\ue000":2}`, "\ue000", `1`)
	f.Add("alice", "session:01K", "stdio:node server.js", "charge_card", `{"card":"4242","amount":100}`, "", `null`)
	f.Add("\xff", "s\x01", "u\u2028", "t\"", `{"b":[1,2.50,1e2],"a":{"\u00e9":null}}`, "", `null`)
	f.Fuzz(func(t *testing.T, actor, scope, upstream, tool, args, extraName, extraValue string) {
		if !json.Valid([]byte(args)) || !isObject([]byte(args)) || !json.Valid([]byte(extraValue)) {
			t.Skip()
		}
		switch extraName {
		case "actor", "scope", "upstream", "tool", "arguments":
			t.Skip()
		}
		a := Action{Actor: actor, Scope: scope, Upstream: upstream, Tool: tool, Arguments: json.RawMessage(args),
			Extra: map[string]json.RawMessage{extraName: json.RawMessage(extraValue)}}
		if extraName == "" {
			a.Extra = nil // the common case, which Canonical writes straight out
		}
		got, gerr := Canonical(a)
		want, werr := jcsWhole(a)
		if (gerr != nil) != (werr != nil) {
			t.Fatalf("Canonical error %v; jcs on the whole record: %v", gerr, werr)
		}
		if gerr == nil && !bytes.Equal(got, want) {
			t.Fatalf("Canonical:\n %s\njcs on the whole record:\n %s", got, want)
		}
		if gerr != nil {
			return
		}
		// Sum reuses its buffers: it must still hash exactly Canonical.
		mac := hmac.New(sha256.New, fuzzKey)
		mac.Write(got)
		if s, err := fuzzHasher.Sum(a); err != nil || s != hex.EncodeToString(mac.Sum(nil)) {
			t.Fatalf("Sum = %s, %v; want the HMAC of Canonical %s", s, err, hex.EncodeToString(mac.Sum(nil)))
		}
		if s, err := fuzzHasher.SumValid(a); err != nil || s != hex.EncodeToString(mac.Sum(nil)) {
			t.Fatalf("SumValid = %s, %v; want the HMAC of Canonical %s", s, err, hex.EncodeToString(mac.Sum(nil)))
		}
	})
}

// TestSumIsHexOfHMAC checks Sum's hex digits against encoding/hex over
// enough fingerprints that every byte value comes at every place of the
// four-byte groups Sum writes at once.
func TestSumIsHexOfHMAC(t *testing.T) {
	for i := range 300 {
		a := Action{Actor: "alice", Tool: fmt.Sprint("tool", i), Arguments: json.RawMessage(`{"n":1}`)}
		canon, err := Canonical(a)
		if err != nil {
			t.Fatal(err)
		}
		mac := hmac.New(sha256.New, fuzzKey)
		mac.Write(canon)
		want := hex.EncodeToString(mac.Sum(nil))
		if got, err := fuzzHasher.Sum(a); err != nil || got != want {
			t.Fatalf("Sum = %s, %v; want %s", got, err, want)
		}
	}
}

// isObject reports whether raw, after any white space, begins an object.
func isObject(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

// TestHexDigits checks hexDigits against encoding/hex with every byte
// value at every place of a sum.
func TestHexDigits(t *testing.T) {
	for start := range 256 {
		var sum [sha256.Size]byte
		for i := range sum {
			sum[i] = byte(start + i*8)
		}
		if got, want := hexDigits(&sum), hex.EncodeToString(sum[:]); string(got[:]) != want {
			t.Fatalf("hexDigits(%x) = %s", sum, got)
		}
	}
}
