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
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"

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
	// inputResponses of a continuation. Nil members are left out; a name
	// of the record's own (actor, scope, upstream, tool, arguments) is an
	// error.
	Extra map[string]json.RawMessage
}

// A Hasher computes fingerprints under one secret. It is safe for concurrent
// use.
type Hasher struct {
	key   []byte      // written once, before keyed is set
	keyed atomic.Bool // key is set: a Pending Hasher has none yet
	pads  *macPads    // key's pads, written with key; nil: crypto/hmac
	// states holds *macState: HMACs under key, reset before use, and
	// buffers for the canonical form, in one pool.
	states sync.Pool
	// spare is a state kept out of the pool: taking it and giving it
	// back cost an atomic operation each, where the pool's Get and Put
	// cost about 115 instructions a sum. A sum that finds it taken, as
	// sums running at once do, uses the pool.
	spare atomic.Pointer[macState]
}

func withKey(key []byte) *Hasher {
	h := Pending()
	h.key, h.pads = key, newPads(key)
	h.keyed.Store(true)
	return h
}

// Pending returns a Hasher without a secret yet: its Sum fails with
// ErrNoSecret until SetSecret gives it one. A proxy whose secret is kept
// by a store it cannot reach yet starts with one, so that what needs no
// fingerprint (read-only calls) is served meanwhile.
func Pending() *Hasher {
	h := &Hasher{}
	h.states.New = func() any {
		st := &macState{}
		if h.pads != nil {
			st.mac = newMAC(h.pads)
		}
		if st.mac == nil {
			st.ref = hmac.New(sha256.New, h.key)
		}
		return st
	}
	return h
}

// ErrNoSecret is Sum's error on a Pending Hasher not given its secret yet.
var ErrNoSecret = errors.New("the fingerprint secret is not known yet")

// SetSecret gives a Pending Hasher its secret, which must be at least
// MinSecret bytes. A Hasher that has one keeps it: SetSecret then fails.
// It is not safe to call it from two goroutines at once.
func (h *Hasher) SetSecret(secret []byte) error {
	if len(secret) < MinSecret {
		return fmt.Errorf("fingerprint secret is %d bytes; it must be at least %d", len(secret), MinSecret)
	}
	if h.keyed.Load() || h.key != nil {
		return errors.New("the fingerprint secret is set already")
	}
	h.key = append([]byte(nil), secret...)
	h.pads = newPads(h.key)
	h.keyed.Store(true)
	return nil
}

// MinSecret is the shortest secret accepted, in bytes.
const MinSecret = 16

// New returns a Hasher keyed by secret, which must be at least MinSecret
// bytes.
func New(secret []byte) (*Hasher, error) {
	if len(secret) < MinSecret {
		return nil, fmt.Errorf("fingerprint secret is %d bytes; it must be at least %d", len(secret), MinSecret)
	}
	return withKey(append([]byte(nil), secret...)), nil
}

// NewRandom returns a Hasher keyed by a fresh random secret: fingerprints
// then match only within this process.
func NewRandom() *Hasher {
	key := make([]byte, 32)
	rand.Read(key) // never fails (crypto/rand documents it)
	return withKey(key)
}

// Canonical returns the RFC 8785 form of a's action record.
//
// The record's own members are plain strings whose canonical form is
// written here; only the JSON values that come from the caller (the
// arguments and any Extra) go through jcs.Transform, so the long upstream
// and scope strings are not parsed again on every call. The result is the
// same bytes jcs.Transform gives for the whole record (FuzzCanonical checks
// it).
func Canonical(a Action) ([]byte, error) {
	return appendCanonical(nil, &a, false, nil)
}

// appendCanonical appends the RFC 8785 form of a's action record to out.
// argsValid says that a.Arguments and a.Extra's values are known to be
// valid JSON (SumValid). text, if not nil, keeps the record's text
// around the arguments from one call to the next.
func appendCanonical(out []byte, a *Action, argsValid bool, text *recordText) ([]byte, error) {
	args := trimJSONSpace(a.Arguments)
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	if len(a.Extra) == 0 {
		// The common case: the record's own members only, whose names
		// are already in RFC 8785 order, written straight out, each
		// string's quotes with the text around it.
		out = text.appendHead(out, a.Actor)
		var err error
		if out, err = appendCanonicalValue(out, args, argsValid); err != nil {
			return nil, &MemberError{Member: "arguments", Err: err}
		}
		return text.appendTail(out, a), nil
	}
	args, err := appendCanonicalValue(nil, args, argsValid)
	if err != nil {
		return nil, &MemberError{Member: "arguments", Err: err}
	}
	members := make([]member, 0, 5+len(a.Extra))
	members = append(members,
		member{"actor", appendJCSString(nil, a.Actor)},
		member{"arguments", args},
		member{"scope", appendJCSString(nil, a.Scope)},
		member{"tool", appendJCSString(nil, a.Tool)},
		member{"upstream", appendJCSString(nil, a.Upstream)},
	)
	for k, v := range a.Extra {
		if v == nil {
			continue
		}
		switch k {
		case "arguments", "actor", "scope", "upstream", "tool":
			// An Extra "arguments" would replace the arguments, an
			// Extra "actor" would be dropped: either way two different
			// calls could share a fingerprint.
			return nil, fmt.Errorf("extra member %q has the name of an action record member", k)
		}
		// Numbers in Extra get the same guard as the arguments:
		// inputResponses may carry amounts.
		cv, err := appendCanonicalValue(nil, v, argsValid)
		if err != nil {
			return nil, &MemberError{Member: k, Err: err}
		}
		members = append(members, member{k, cv})
	}
	// RFC 8785 section 3.2.3: members sorted by their names as UTF-16
	// code units.
	slices.SortFunc(members, func(x, y member) int { return compareUTF16(x.name, y.name) })
	out = append(out, '{')
	for i, m := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJCSString(out, m.name)
		out = append(out, ':')
		out = append(out, m.value...)
	}
	return append(out, '}'), nil
}

// A MemberError is Sum's error for a value that cannot be fingerprinted:
// it names the member of the action record that holds it, the arguments
// or one of Extra, so that a caller can say which part of a call to fix.
type MemberError struct {
	Member string // "arguments", or a name in Extra
	Err    error
}

func (e *MemberError) Error() string { return e.Member + ": " + e.Err.Error() }

func (e *MemberError) Unwrap() error { return e.Err }

type member struct {
	name  string
	value []byte // canonical JSON
}

// CheckValue returns why v cannot be fingerprinted (it is not JSON, an
// object in it holds one name twice, a string in it is not UTF-8, a
// number in it is out of range), or nil if it can. A caller that reads v
// with encoding/json before fingerprinting it checks it first: decoding
// keeps the last of two members of one name and turns invalid UTF-8 into
// U+FFFD, so two different values could come out alike.
func CheckValue(v json.RawMessage) error {
	_, err := canonicalValue(v)
	return err
}

// canonicalValue returns the RFC 8785 form of a JSON value from a caller,
// with the exact-number guard applied first.
func canonicalValue(v json.RawMessage) ([]byte, error) {
	return appendCanonicalValue(nil, v, false)
}

// appendCanonicalValue is canonicalValue appending to out. valid says
// that v is known to be valid JSON; if not, it is checked here.
func appendCanonicalValue(out []byte, v json.RawMessage, valid bool) ([]byte, error) {
	// encoding/json's Valid, not jsonrpc's: this package is a leaf. It
	// is the slower of the two, paid only where no caller vouches.
	if valid || json.Valid(v) {
		// Most arguments are simple enough to be canonicalised in one
		// pass here. A value appendSimple takes, whose numbers are all
		// short integers, whose strings have no escapes and whose names
		// none that escapeKeys would change, exactNumbers would return
		// as it is.
		if canon, ok := appendSimple(out, v); ok {
			return canon, nil
		}
	}
	v, err := exactNumbers(v) // invalid JSON is refused here or by jcs
	if err != nil {
		return nil, err
	}
	canon, err := jcs.Transform(v)
	if err != nil {
		return nil, fmt.Errorf("canonicalising: %w", err)
	}
	return append(out, canon...), nil
}

// appendJCSString appends s as RFC 8785 serialises a string (ECMAScript's
// JSON.stringify): quote, backslash and control characters escaped, the
// five with short forms as \b \f \n \r \t, the rest as \u00xx in lower
// case; everything else as it is. Each byte of invalid UTF-8 becomes
// U+FFFD, as when encoding/json writes a string.
func appendJCSString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendJCSChars(b, s)
	return append(b, '"')
}

// appendJCSChars is appendJCSString without the quotes.
func appendJCSChars(b []byte, s string) []byte {
	if plainASCII(s) {
		// The common case, for names, scopes and most arguments: the
		// string as it is.
		return append(b, s...)
	}
	if !utf8.ValidString(s) {
		var v strings.Builder
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRuneInString(s[i:])
			v.WriteRune(r) // RuneError for an invalid byte
			i += n
		}
		s = v.String()
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20:
			b = append(b, c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	return b
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785
// sorts member names. It differs from byte order only for characters
// beyond U+FFFF against those from U+E000 to U+FFFF.
func compareUTF16(x, y string) int {
	if isASCII(x) && isASCII(y) {
		return strings.Compare(x, y)
	}
	a, b := utf16.Encode([]rune(x)), utf16.Encode([]rune(y))
	return slices.Compare(a, b)
}

// ErrArguments is returned for arguments that are not a JSON object.
var ErrArguments = errors.New("arguments must be a JSON object")

// Sum returns a's fingerprint as lowercase hex.
func (h *Hasher) Sum(a Action) (string, error) {
	return h.sum(&a, false)
}

// SumValid is Sum for an action whose Arguments and Extra values are
// known to be valid JSON, as json.Valid reports: a tools/call's are, once
// jsonrpc has read the frame they came in. It does not check their
// grammar again. Given values that are not valid JSON it may return a
// fingerprint that means nothing (it never reads out of bounds): a
// caller that cannot vouch for them calls Sum.
func (h *Hasher) SumValid(a Action) (string, error) {
	return h.sum(&a, true)
}

func (h *Hasher) sum(a *Action, argsValid bool) (string, error) {
	if !h.keyed.Load() {
		return "", ErrNoSecret
	}
	if args := trimJSONSpace(a.Arguments); len(args) > 0 && string(args) != "null" && args[0] != '{' {
		return "", ErrArguments
	}
	var st *macState
	// Load before Swap: a read leaves the word's cache line shared, where
	// sums running at once would take it from each other only to find
	// the spare gone.
	if h.spare.Load() != nil {
		st = h.spare.Swap(nil)
	}
	if st == nil {
		st = h.states.Get().(*macState)
	}
	canon, err := appendCanonical(st.buf[:0], a, argsValid, &st.text)
	if err != nil {
		h.release(st)
		return "", err
	}
	if st.mac != nil {
		st.sum, canon = st.mac.sum(canon)
	} else {
		st.ref.Reset()
		st.ref.Write(canon)
		st.ref.Sum(st.sum[:0])
	}
	if cap(canon) <= maxKeptBuffer {
		st.buf = canon
	}
	digits := hexDigits(&st.sum)
	h.release(st)
	return string(digits[:]), nil
}

// release gives st back, as the spare if there is none.
func (h *Hasher) release(st *macState) {
	if h.spare.Load() != nil || !h.spare.CompareAndSwap(nil, st) {
		h.states.Put(st)
	}
}

// hexDigits returns sum's lowercase hex digits.
func hexDigits(sum *[sha256.Size]byte) (digits [2 * sha256.Size]byte) {
	for i := 0; i < len(sum); i += 4 {
		// Four bytes' digits in one store. (Working them out in a
		// word, without the table, took more instructions.)
		v := sum[i : i+4]
		binary.BigEndian.PutUint64(digits[2*i:], uint64(hexPairs[v[0]])<<48|uint64(hexPairs[v[1]])<<32|
			uint64(hexPairs[v[2]])<<16|uint64(hexPairs[v[3]]))
	}
	return digits
}

// hexPairs holds each byte's two lowercase hex digits, the first in the
// high byte: a lookup a byte, where hex.Encode's loop cost about 640
// instructions a fingerprint.
var hexPairs = func() (t [256]uint16) {
	const digits = "0123456789abcdef"
	for i := range t {
		t[i] = uint16(digits[i>>4])<<8 | uint16(digits[i&15])
	}
	return t
}()

// macState is an HMAC, the room for its sum and a buffer for the
// canonical form it reads, kept together so that a sum costs no
// allocation.
type macState struct {
	mac  *mac      // nil where newPads found crypto/sha256 unlike it expects
	ref  hash.Hash // crypto/hmac, where mac is nil
	sum  [sha256.Size]byte
	buf  []byte
	text recordText
}

// maxKeptBuffer bounds the canonical-form buffers a Hasher keeps for
// reuse, so that one call with huge arguments does not pin its buffer.
const maxKeptBuffer = 16 << 10

// trimJSONSpace trims the white space JSON allows around a value: space,
// tab, CR and LF. bytes.TrimSpace would also take a form feed or a
// vertical tab, which encoding/json refuses, and the fingerprint would
// then accept what an upstream decoding with it could not read.
func trimJSONSpace(b []byte) []byte {
	for len(b) > 0 && isJSONSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isJSONSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// isJSONSpace tests c <= ' ' first: most bytes it is asked about are
// not space, and that one test turns them away.
func isJSONSpace(c byte) bool { return c <= ' ' && (c == ' ' || c == '\t' || c == '\r' || c == '\n') }

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
	if !needsExactPass(raw) {
		return raw, nil
	}
	// encoding/json keeps the last of two members and reads invalid
	// UTF-8 and lone surrogates as U+FFFD, and jcs sees only what it
	// writes back: what jcs would refuse is refused first.
	if err := checkStrict(raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decoding arguments: %w", err)
	}
	if err := checkNumbers(v); err != nil {
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
		reserved := false
		for k, e := range v {
			v[k] = walkNumbers(e, changed)
			reserved = reserved || strings.HasPrefix(k, decimalKey)
		}
		if reserved {
			*changed = true
			return escapeKeys(v)
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

// escapeKeys appends "~" to every key of m that begins with decimalKey, so
// that an argument object such as {"mcp-idempotent/decimal": "1/3"} never
// reads as the stand-in for a number. The mapping is one to one: escaped
// keys keep the prefix and unescaped ones never had it.
func escapeKeys(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, e := range m {
		if strings.HasPrefix(k, decimalKey) {
			k += "~"
		}
		out[k] = e
	}
	return out
}

// maxExponent bounds the exponent of a number literal that exactDecimal
// expands: 1e999999999 is eleven bytes on the wire and a gigabyte as a
// fraction.
const maxExponent = 4096

// maxNumberLength bounds the length of a number literal that exactDecimal
// reads: reading n decimal digits into a big number takes time that grows
// faster than n (4 million digits took 21 s). No IEEE 754 double needs
// more than about 1,100 characters to be spelled exactly, even in plain
// notation (the smallest subnormal, 323 zeros and 751 digits after the
// point).
const maxNumberLength = 2048

// ErrNumber is returned for a number literal too long, or with too large
// an exponent, to fingerprint: 1e-5000 as much as 1e5000.
var ErrNumber = errors.New("a number in it is past what the fingerprint reads")

// checkNumbers returns ErrNumber, saying why, for the first number in v
// whose exponent or length is past its bound.
func checkNumbers(v any) error {
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			if err := checkNumbers(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range v {
			if err := checkNumbers(e); err != nil {
				return err
			}
		}
	case json.Number:
		s := string(v)
		if len(s) > maxNumberLength {
			return fmt.Errorf("%w: it is %d characters long, past %d (no IEEE 754 double needs that many)", ErrNumber, len(s), maxNumberLength)
		}
		if i := strings.IndexAny(s, "eE"); i >= 0 {
			exp, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
			switch {
			case err != nil:
				return fmt.Errorf("%w: its exponent is beyond ±%d", ErrNumber, maxExponent)
			case exp > maxExponent || exp < -maxExponent:
				return fmt.Errorf("%w: its exponent, %d, is beyond ±%d", ErrNumber, exp, maxExponent)
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

// needsExactPass reports whether raw may hold a number literal that a
// double does not represent exactly, or a key that needs escaping. It
// scans the bytes once, skipping strings, and passes every literal with at most 15 significant digits and
// a moderate exponent: such a decimal survives the trip through a double
// and back (the guarantee behind C's DBL_DIG), so it needs no exact
// arithmetic. Malformed input answers true, leaving the verdict to the
// decoder.
func needsExactPass(raw []byte) bool {
	// A key that might read as decimalKey must be escaped (escapeKeys), and
	// a \u escape can spell any key: both take the careful path.
	if bytes.Contains(raw, []byte("decimal")) || bytes.Contains(raw, []byte(`\u`)) {
		return true
	}
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
			if i >= len(raw) {
				return true
			}
		case c == '-' || c >= '0' && c <= '9':
			j := i
			for j < len(raw) && strings.IndexByte("+-0123456789.eE", raw[j]) >= 0 {
				j++
			}
			if !exactEnough(raw[i:j]) {
				return true
			}
			i = j - 1
		}
	}
	return false
}

// exactEnough reports whether the number literal num has at most 15
// significant digits and a magnitude a double holds: every digit of it
// within 10^±300. The digits' places count, not only the exponent: a long
// run of zeros can carry 0.000…1e-300 past what a double holds, where it
// would read as 0. The bound is loose on purpose: a number it turns away
// only takes the exact path.
func exactEnough(num []byte) bool {
	digits, leading := 0, true
	for k, c := range num {
		switch {
		case c >= '0' && c <= '9':
			if c != '0' || !leading {
				leading = false
				digits++
			}
		case c == 'e' || c == 'E':
			exp, err := strconv.Atoi(strings.TrimPrefix(string(num[k+1:]), "+"))
			return err == nil && digits <= 15 && exp-k >= -300 && exp+k <= 300
		}
	}
	return digits <= 15 && len(num) <= 300
}

// plainASCII reports whether s is printable ASCII without a quote or a
// backslash: bytes RFC 8785 writes as they are. It reads eight bytes at
// a time, the last eight of a string at once too, some of them a second
// time.
func plainASCII(s string) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	if len(s) < 8 {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				return false
			}
		}
		return true
	}
	for i := 0; ; i += 8 {
		i = min(i, len(s)-8)
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		quote, backslash := x^(ones*'"'), x^(ones*'\\')
		// A byte below 0x20, a quote, a backslash, or one from 0x80 up.
		if ((quote-ones)&^quote|(backslash-ones)&^backslash|(x-ones*0x20)&^x|x)&highs != 0 {
			return false
		}
		if i == len(s)-8 {
			return true
		}
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
