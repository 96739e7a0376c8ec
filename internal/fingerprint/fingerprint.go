// Package fingerprint computes an action's intent fingerprint: a keyed
// digest (HMAC-SHA-256) of its canonical action record, serialised with
// RFC 8785 (JSON Canonicalization Scheme).
//
// Canonical form makes the fingerprint blind to spelling: key order, white
// space and number spelling (100, 1e2, 100.0) never change it. The key makes
// it useless as a guessing oracle: without the secret nobody can test
// whether a stored fingerprint belongs to a card number they guess.
package fingerprint

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/gowebpki/jcs"
)

// An Action is what a tool call asks for, the input of the fingerprint.
type Action struct {
	Actor    string // who asks
	Scope    string // the intent scope the call is matched within
	Upstream string // which server, normalised
	Tool     string
	// Arguments is the call's arguments object after the tool's policy was
	// applied. Nil means no arguments, the same as {}.
	Arguments json.RawMessage
	// Extra holds members that change what the call means besides its
	// arguments, such as the task mode of a task-augmented call or the
	// inputResponses of a continuation. Nil members are left out.
	Extra map[string]json.RawMessage
}

// A Hasher computes fingerprints under one secret. It is safe for concurrent
// use.
type Hasher struct {
	key []byte
}

// MinSecret is the shortest secret accepted, in bytes.
const MinSecret = 16

// New returns a Hasher keyed by secret, which must be at least MinSecret
// bytes.
func New(secret []byte) (*Hasher, error) {
	if len(secret) < MinSecret {
		return nil, fmt.Errorf("fingerprint secret is %d bytes; it must be at least %d", len(secret), MinSecret)
	}
	return &Hasher{key: append([]byte(nil), secret...)}, nil
}

// NewRandom returns a Hasher keyed by a fresh random secret: fingerprints
// then match only within this process.
func NewRandom() *Hasher {
	key := make([]byte, 32)
	rand.Read(key) // never fails (crypto/rand documents it)
	return &Hasher{key: key}
}

// Canonical returns the RFC 8785 form of a's action record.
func Canonical(a Action) ([]byte, error) {
	args := a.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	args, err := exactNumbers(args)
	if err != nil {
		return nil, err
	}
	rec := map[string]json.RawMessage{"arguments": args}
	var raw []byte
	for k, v := range a.Extra {
		if v != nil {
			rec[k] = v
		}
	}
	for k, v := range map[string]string{"actor": a.Actor, "scope": a.Scope, "upstream": a.Upstream, "tool": a.Tool} {
		rec[k], _ = json.Marshal(v) // strings always marshal
	}
	raw, err = json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encoding action record: %w", err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonicalising action record: %w", err)
	}
	return canon, nil
}

// ErrArguments is returned for arguments that are not a JSON object.
var ErrArguments = errors.New("arguments must be a JSON object")

// Sum returns a's fingerprint as lowercase hex.
func (h *Hasher) Sum(a Action) (string, error) {
	if len(a.Arguments) > 0 && string(a.Arguments) != "null" && !isObject(a.Arguments) {
		return "", ErrArguments
	}
	canon, err := Canonical(a)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, h.key)
	mac.Write(canon)
	return hex.EncodeToString(mac.Sum(nil)), nil
}

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

// decimalKey marks a number that a double cannot hold exactly; see
// exactNumbers.
const decimalKey = "mcp-idempotent/decimal"

// exactNumbers guards against a trap in RFC 8785: it reads every number as
// an IEEE 754 double, so 12345678901234567 and 12345678901234568 would
// canonicalise alike and two different charges would share a fingerprint.
// A number whose value is not exactly the double that JCS would print is
// replaced by {"mcp-idempotent/decimal": "p/q"}, its exact value as a
// reduced fraction: still blind to spelling (1e400 and 10e399 agree), never
// blind to value. raw is returned unchanged when it holds no such number,
// which is the common case.
func exactNumbers(raw json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decoding arguments: %w", err)
	}
	if err := checkExponents(v); err != nil {
		return nil, err
	}
	changed := false
	v = walkNumbers(v, &changed)
	if !changed {
		return raw, nil
	}
	return json.Marshal(v)
}

func walkNumbers(v any, changed *bool) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = walkNumbers(e, changed)
		}
	case []any:
		for i, e := range v {
			v[i] = walkNumbers(e, changed)
		}
	case json.Number:
		if exact, ok := exactDecimal(string(v)); !ok {
			*changed = true
			return map[string]any{decimalKey: exact}
		}
	}
	return v
}

// maxExponent bounds the exponent of a number literal that exactDecimal
// expands: 1e999999999 is eleven bytes on the wire and a gigabyte as a
// fraction.
const maxExponent = 4096

// ErrNumber is returned for a number literal too large to fingerprint.
var ErrNumber = errors.New("a number in the arguments has an exponent beyond ±4096")

func checkExponents(v any) error {
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			if err := checkExponents(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range v {
			if err := checkExponents(e); err != nil {
				return err
			}
		}
	case json.Number:
		s := string(v)
		if i := strings.IndexAny(s, "eE"); i >= 0 {
			exp, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
			if err != nil || exp > maxExponent || exp < -maxExponent {
				return ErrNumber
			}
		}
	}
	return nil
}

// exactDecimal reports whether the decimal literal s has exactly the value
// of the shortest form of its nearest double; if not, it returns s's exact
// value as a reduced fraction.
func exactDecimal(s string) (string, bool) {
	want, ok := new(big.Rat).SetString(s)
	if !ok {
		return s, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err == nil {
		if got, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64)); ok && got.Cmp(want) == 0 {
			return "", true
		}
	}
	return want.String(), false
}
