package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
)

// testSecret is a fixed secret, so that fingerprints are reproducible.
const testSecret = "test-secret-0123456789abcdef"

func newHasher(t testing.TB) *Hasher {
	t.Helper()
	h, err := New([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// base is the action the table tests vary.
func base() Action {
	return Action{
		Actor:     "alice",
		Scope:     "session:01J",
		Upstream:  "stdio:node bank.js",
		Tool:      "charge_card",
		Arguments: json.RawMessage(`{"amount":5000,"card":"4242"}`),
	}
}

func withArgs(args string) Action {
	a := base()
	if args != "<nil>" {
		a.Arguments = json.RawMessage(args)
	} else {
		a.Arguments = nil
	}
	return a
}

func sum(t *testing.T, h *Hasher, a Action) string {
	t.Helper()
	s, err := h.Sum(a)
	if err != nil {
		t.Fatalf("Sum(%+v): %v", a, err)
	}
	if len(s) != 64 || strings.ToLower(s) != s {
		t.Fatalf("Sum = %q, want 64 lowercase hex digits", s)
	}
	return s
}

// TestSame lists groups of actions that must share a fingerprint.
func TestSame(t *testing.T) {
	h := newHasher(t)
	groups := []struct {
		name    string
		actions []Action
	}{
		{"key order and white space", []Action{
			withArgs(`{"amount":5000,"card":"4242"}`),
			withArgs(`{"card":"4242","amount":5000}`),
			withArgs(" {\n  \"card\" : \"4242\",\r\n\t\"amount\" : 5000\n} "),
		}},
		{"number spelling", []Action{
			withArgs(`{"amount":100}`),
			withArgs(`{"amount":1e2}`),
			withArgs(`{"amount":100.0}`),
			withArgs(`{"amount":1E2}`),
			withArgs(`{"amount":100.00}`),
			withArgs(`{"amount":1E+2}`),
			withArgs(`{"amount":10e1}`),
			withArgs(`{"amount":1000e-1}`),
		}},
		{"fractions", []Action{
			withArgs(`{"rate":0.5}`),
			withArgs(`{"rate":5e-1}`),
			withArgs(`{"rate":0.50}`),
		}},
		{"zero", []Action{
			withArgs(`{"n":0}`),
			withArgs(`{"n":-0}`),
			withArgs(`{"n":0.0}`),
			withArgs(`{"n":0e10}`),
		}},
		{"nested objects", []Action{
			withArgs(`{"order":{"items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"total":{"value":100,"currency":"EUR"}}}`),
			withArgs(`{"order":{"total":{"currency":"EUR","value":1e2},"items":[{"qty":1.0,"sku":"a"},{"qty":2,"sku":"b"}]}}`),
		}},
		{"string escapes", []Action{
			withArgs(`{"note":"é <b>"}`),
			withArgs(`{"note":"\u00e9 \u003cb\u003e"}`),
			withArgs(`{"\u006eote":"\u00E9 <b>"}`),
		}},
		{"no arguments", []Action{
			withArgs("<nil>"),
			withArgs(`{}`),
			withArgs(`null`),
			withArgs(``),
			withArgs(` { } `),
			withArgs(" null\n"),
		}},
		{"numbers past a double's range, spelt differently", []Action{
			withArgs(`{"n":1e400}`),
			withArgs(`{"n":10e399}`),
			withArgs(`{"n":0.1e401}`),
		}},
		{"integers past 2^53, spelt differently", []Action{
			withArgs(`{"n":12345678901234567}`),
			withArgs(`{"n":1.2345678901234567e16}`),
			withArgs(`{"n":12345678901234567.000}`),
		}},
		{"nil extra members", []Action{
			base(),
			func() Action { a := base(); a.Extra = map[string]json.RawMessage{}; return a }(),
			func() Action { a := base(); a.Extra = map[string]json.RawMessage{"task": nil}; return a }(),
		}},
		{"extra members spelt differently", []Action{
			func() Action {
				a := base()
				a.Extra = map[string]json.RawMessage{"inputResponses": json.RawMessage(`{"r":{"amount":100,"ok":true}}`)}
				return a
			}(),
			func() Action {
				a := base()
				a.Extra = map[string]json.RawMessage{"inputResponses": json.RawMessage(`{ "r" : { "ok" : true, "amount" : 1e2 } }`)}
				return a
			}(),
		}},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			want := sum(t, h, g.actions[0])
			for _, a := range g.actions[1:] {
				if got := sum(t, h, a); got != want {
					t.Errorf("arguments %s: fingerprint %.16s, want %.16s (as for %s)", a.Arguments, got, want, g.actions[0].Arguments)
				}
			}
		})
	}
}

// TestDifferent lists actions that must all have different fingerprints.
func TestDifferent(t *testing.T) {
	h := newHasher(t)
	vary := func(f func(*Action)) Action {
		a := base()
		f(&a)
		return a
	}
	actions := map[string]Action{
		"base":                    base(),
		"actor":                   vary(func(a *Action) { a.Actor = "bob" }),
		"scope":                   vary(func(a *Action) { a.Scope = "session:01K" }),
		"upstream":                vary(func(a *Action) { a.Upstream = "stdio:node other.js" }),
		"tool":                    vary(func(a *Action) { a.Tool = "refund_card" }),
		"no arguments":            withArgs(`{}`),
		"amount":                  withArgs(`{"amount":5001,"card":"4242"}`),
		"amount as string":        withArgs(`{"amount":"5000","card":"4242"}`),
		"extra member":            withArgs(`{"amount":5000,"card":"4242","memo":null}`),
		"array order 1":           withArgs(`{"cards":["a","b"]}`),
		"array order 2":           withArgs(`{"cards":["b","a"]}`),
		"array length":            withArgs(`{"cards":["a","b","b"]}`),
		"nested":                  withArgs(`{"cards":{"a":"b"}}`),
		"2^53+1":                  withArgs(`{"n":12345678901234567}`),
		"2^53+2":                  withArgs(`{"n":12345678901234568}`),
		"9007199254740993":        withArgs(`{"n":9007199254740993}`),
		"9007199254740992":        withArgs(`{"n":9007199254740992}`),
		"0.1+tiny":                withArgs(`{"n":0.10000000000000000001}`),
		"0.1":                     withArgs(`{"n":0.1}`),
		"1e400":                   withArgs(`{"n":1e400}`),
		"1e401":                   withArgs(`{"n":1e401}`),
		"decimal look-alike":      withArgs(`{"n":{"mcp-idempotent/decimal":"12345678901234567/1"}}`),
		"decimal look-alike 2":    withArgs(`{"n":{"mcp-idempotent/decimal~":"12345678901234567/1"}}`),
		"extra task":              vary(func(a *Action) { a.Extra = map[string]json.RawMessage{"task": json.RawMessage(`true`)} }),
		"extra task false":        vary(func(a *Action) { a.Extra = map[string]json.RawMessage{"task": json.RawMessage(`false`)} }),
		"extra inputResponses":    vary(func(a *Action) { a.Extra = map[string]json.RawMessage{"inputResponses": json.RawMessage(`{"r":1}`)} }),
		"extra big number":        vary(func(a *Action) { a.Extra = map[string]json.RawMessage{"x": json.RawMessage(`12345678901234567`)} }),
		"extra big number + 1":    vary(func(a *Action) { a.Extra = map[string]json.RawMessage{"x": json.RawMessage(`12345678901234568`)} }),
		"arguments name in extra": withArgs(`{"amount":5000,"card":"4242","task":true}`),
	}
	seen := make(map[string]string)
	for name, a := range actions {
		s := sum(t, h, a)
		if other, ok := seen[s]; ok {
			t.Errorf("%q and %q share the fingerprint %.16s", name, other, s)
		}
		seen[s] = name
	}

	// The same action under another secret is another fingerprint.
	h2, err := New([]byte(testSecret + "!"))
	if err != nil {
		t.Fatal(err)
	}
	if sum(t, h, base()) == sum(t, h2, base()) {
		t.Error("two secrets give the same fingerprint")
	}
	if sum(t, NewRandom(), base()) == sum(t, NewRandom(), base()) {
		t.Error("two random secrets give the same fingerprint")
	}
}

func TestFieldsDoNotRunTogether(t *testing.T) {
	// A naive concatenation would give these the same input.
	h := newHasher(t)
	a, b := base(), base()
	a.Actor, a.Scope = "ab", "c"
	b.Actor, b.Scope = "a", "bc"
	if sum(t, h, a) == sum(t, h, b) {
		t.Error("actor and scope run together")
	}
}

func TestErrors(t *testing.T) {
	h := newHasher(t)
	tests := []struct {
		name string
		args string
		want error // nil: any error
	}{
		{"array", `[1,2]`, ErrArguments},
		{"string", `"x"`, ErrArguments},
		{"number", `3`, ErrArguments},
		{"true", `true`, ErrArguments},
		{"not JSON", `amount=5`, ErrArguments},
		{"truncated object", `{"a":1`, nil},
		{"trailing garbage", `{"a":1} x`, nil},
		{"huge exponent", `{"n":1e999999999}`, ErrNumber},
		{"huge negative exponent", `{"n":1e-999999999}`, ErrNumber},
		{"exponent past int", `{"n":1e99999999999999999999}`, ErrNumber},
		{"huge exponent nested", `{"a":[{"b":[1,2,1E+5000]}]}`, ErrNumber},
		{"just past the bound", `{"n":1e4097}`, ErrNumber},
		// Reading 4 million digits into a big number took 21 s of CPU.
		{"4 million digits", `{"n":` + strings.Repeat("7", 4_000_000) + `}`, ErrNumber},
		{"a number one character too long", `{"n":1` + strings.Repeat("0", maxNumberLength) + `}`, ErrNumber},
		{"a long fraction", `{"n":0.` + strings.Repeat("1", maxNumberLength) + `}`, ErrNumber},
		// encoding/json refuses a form feed around a value, so an
		// upstream could not read these arguments as they are taken.
		{"a form feed before", "\f{}", ErrArguments},
		{"a form feed after", "{}\f", nil},
		{"a vertical tab before", "\v{}", ErrArguments},
		{"duplicate member", `{"a":1,"a":2}`, nil},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", nil},
		{"lone surrogate", `{"a":"\ud800"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A hang here (expanding 10^999999999) would end in the test
			// timeout; checkNumbers refuses it before any expansion.
			s, err := h.Sum(withArgs(tt.args))
			if err == nil {
				t.Fatalf("Sum(%s) = %.16s, want an error", tt.args, s)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Sum(%s) = %v, want %v", tt.args, err, tt.want)
			}
		})
	}

	// A tiny number is refused for its exponent, not called large.
	if _, err := h.Sum(withArgs(`{"n":1e-5000}`)); err == nil || strings.Contains(err.Error(), "large") || !strings.Contains(err.Error(), "exponent, -5000, is beyond ±4096") {
		t.Errorf("Sum(1e-5000) = %v; want it refused for its exponent, -5000", err)
	}

	a := base()
	a.Extra = map[string]json.RawMessage{"x": json.RawMessage(`[1e999999999]`)}
	if _, err := h.Sum(a); !errors.Is(err, ErrNumber) {
		t.Errorf("huge exponent in Extra: %v, want ErrNumber", err)
	}
	a.Extra = map[string]json.RawMessage{"x": json.RawMessage(`{`)}
	if _, err := h.Sum(a); err == nil {
		t.Error("invalid JSON in Extra: no error")
	}
	for _, name := range []string{"arguments", "actor", "scope", "upstream", "tool"} {
		a.Extra = map[string]json.RawMessage{name: json.RawMessage(`{"z":1}`)}
		if _, err := h.Sum(a); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Extra member %q: %v, want an error naming it", name, err)
		}
	}
}

func TestNumberBounds(t *testing.T) {
	h := newHasher(t)
	// The smallest subnormal double, spelled exactly in plain notation.
	tiny := new(big.Float).SetPrec(4096).SetFloat64(math.SmallestNonzeroFloat64).Text('f', 1074)
	for _, args := range []string{`{"n":1e4096}`, `{"n":1e-4096}`, `{"n":123.456e+4000}`,
		`{"n":` + tiny + `}`, `{"n":1` + strings.Repeat("0", maxNumberLength-1) + `}`} {
		if _, err := h.Sum(withArgs(args)); err != nil {
			t.Errorf("Sum(%s): %v", args, err)
		}
	}
}

func TestNew(t *testing.T) {
	if _, err := New(make([]byte, MinSecret-1)); err == nil {
		t.Errorf("New accepted a %d-byte secret", MinSecret-1)
	}
	secret := []byte(testSecret)
	h, err := New(secret)
	if err != nil {
		t.Fatal(err)
	}
	before := sum(t, h, base())
	secret[0] ^= 0xff // the Hasher keeps its own copy
	if after := sum(t, h, base()); after != before {
		t.Error("changing the caller's secret slice changed the fingerprint")
	}
}

func TestCanonical(t *testing.T) {
	a := withArgs(`{"b":[1E2, 0.50],"a":"x"}`)
	a.Extra = map[string]json.RawMessage{"task": json.RawMessage(`true`)}
	got, err := Canonical(a)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"actor":"alice","arguments":{"a":"x","b":[100,0.5]},"scope":"session:01J","task":true,"tool":"charge_card","upstream":"stdio:node bank.js"}`
	if string(got) != want {
		t.Errorf("Canonical = %s\nwant        %s", got, want)
	}

	a = withArgs(`{"n":12345678901234567,"m":{"mcp-idempotent/decimal":"x"}}`)
	got, err = Canonical(a)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(got, []byte(`"n":{"mcp-idempotent/decimal":"12345678901234567/1"}`)) ||
		!bytes.Contains(got, []byte(`"m":{"mcp-idempotent/decimal~":"x"}`)) {
		t.Errorf("Canonical = %s; want n as an exact fraction and m's key escaped", got)
	}
}

func TestConcurrentUse(t *testing.T) {
	h := newHasher(t)
	want := sum(t, h, base())
	done := make(chan string)
	for range 8 {
		go func() {
			s, _ := h.Sum(base())
			done <- s
		}()
	}
	for range 8 {
		if got := <-done; got != want {
			t.Errorf("concurrent Sum = %.16s, want %.16s", got, want)
		}
	}
}

func ExampleHasher_Sum() {
	// In production the secret comes from MCP_IDEMPOTENT_SECRET, or is
	// random per process.
	h, err := New([]byte("example-secret-do-not-use-0123456789"))
	if err != nil {
		panic(err)
	}
	first, _ := h.Sum(Action{
		Actor:     "alice",
		Scope:     "session:demo",
		Upstream:  "stdio:node bank.js",
		Tool:      "charge_card",
		Arguments: json.RawMessage(`{"amount": 5000, "card": "4242"}`),
	})
	retry, _ := h.Sum(Action{
		Actor:     "alice",
		Scope:     "session:demo",
		Upstream:  "stdio:node bank.js",
		Tool:      "charge_card",
		Arguments: json.RawMessage(`{"card":"4242","amount":5e3}`),
	})
	fmt.Println(first[:16])
	fmt.Println(first == retry)
	// Output:
	// 69a433c75d880d3c
	// true
}

// TestConcurrentDistinct runs sums of different actions at once, so
// that states pass between the spare and the pool while in use: a state
// two sums shared would mix their records.
func TestConcurrentDistinct(t *testing.T) {
	h, ref := newHasher(t), newHasher(t)
	const workers, each = 8, 200
	want := make([][]string, workers)
	for w := range want {
		for i := range each {
			want[w] = append(want[w], sum(t, ref, withArgs(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))))
		}
	}
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range each {
				if got, err := h.Sum(withArgs(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))); err != nil || got != want[w][i] {
					errs <- fmt.Errorf("worker %d, sum %d: %.16s, %v; want %.16s", w, i, got, err, want[w][i])
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func FuzzSum(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"amount":5000,"card":"4242"}`,
		`{"amount":1e2,"rate":0.50,"n":-0,"big":12345678901234567}`,
		`{"order":{"items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"total":{"value":100,"currency":"EUR"}}}`,
		`{"note":"\u00e9 <b> \ud83d\ude00","empty":"","t":true,"f":false,"z":null}`,
		`{"n":1e400,"m":1e-400,"k":5e-324,"j":1.7976931348623157e308}`,
		`{"mcp-idempotent/decimal":"1/3","mcp-idempotent/decimal~":1}`,
		`{"a":[[[[]]]],"b":{"c":{"d":{}}}}`,
		`{"n":1e999999999}`,
		`{"a":1,"a":2}`,
		`[1,2]`,
		`"x"`,
		`null`,
		``,
	} {
		f.Add([]byte(s))
	}
	h := newHasher(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		a := withArgs(string(data))
		got, err := h.Sum(a)
		if json.Valid(data) {
			// SumValid, which trusts the arguments' grammar, must
			// answer as Sum for valid JSON.
			if v, verr := h.SumValid(a); v != got || (verr != nil) != (err != nil) {
				t.Fatalf("SumValid(%q) = %.16s, %v; Sum = %.16s, %v", data, v, verr, got, err)
			}
		}
		if err != nil {
			return
		}
		if len(got) != 64 {
			t.Fatalf("Sum = %q", got)
		}
		// Re-encoding the same value must not change the fingerprint.
		// UseNumber keeps each number's value: json.Unmarshal into
		// float64 would round 12345678901234567, a different value.
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			if len(bytes.TrimSpace(data)) == 0 {
				return
			}
			t.Fatalf("Sum accepted %q, which does not decode: %v", data, err)
		}
		compact, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("re-encoding %q: %v", data, err)
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, compact, " ", "\t"); err != nil {
			t.Fatal(err)
		}
		for _, re := range [][]byte{compact, indented.Bytes()} {
			again, err := h.Sum(withArgs(string(re)))
			if err != nil {
				t.Fatalf("Sum(%q) = %s, but Sum of its re-encoding %q: %v", data, got, re, err)
			}
			if again != got {
				t.Fatalf("Sum(%q) = %.16s, Sum of its re-encoding %q = %.16s", data, got, re, again)
			}
		}
	})
}

// TestTinyAndHugeNumbersStayDistinct: numbers a double cannot hold are
// compared by their exact value however they are spelled, never collapsed
// to 0 or to one another.
func TestTinyAndHugeNumbersStayDistinct(t *testing.T) {
	h := NewRandom()
	sum := func(args string) string {
		t.Helper()
		s, err := h.Sum(Action{Tool: "t", Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatalf("Sum(%s): %v", args, err)
		}
		return s
	}
	zero := sum(`{"x":0}`)
	for _, args := range []string{
		`{"x":0.00000000000000000000000000000001e-300}`,
		`{"x":0.` + strings.Repeat("0", 400) + `1}`,
	} {
		if sum(args) == zero {
			t.Errorf("%s has the fingerprint of 0", args)
		}
	}
	if a, b := sum(`{"x":0.000000000000001234567890123e-300}`), sum(`{"x":0.000000000000001234567890124e-300}`); a == b {
		t.Error("two distinct subnormal numbers share a fingerprint")
	}
	if a, b := sum(`{"x":1e-332}`), sum(`{"x":0.00000000000000000000000000000001e-300}`); a != b {
		t.Error("1e-332 spelled two ways has two fingerprints")
	}
}

// TestPlainASCII puts every byte value at every place of a plain string,
// in the words read by eights and in the last one, against a byte-by-byte
// reading.
func TestPlainASCII(t *testing.T) {
	for n := 1; n <= 25; n++ {
		for at := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("a", n))
				b[at] = byte(c)
				want := !(c < 0x20 || c >= 0x80 || c == '"' || c == '\\')
				if got := plainASCII(string(b)); got != want {
					t.Fatalf("plainASCII(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
}

// TestPending: a Hasher without its secret yet refuses to fingerprint,
// and once given it fingerprints as one made with it.
func TestPending(t *testing.T) {
	a := Action{Actor: "alice", Tool: "charge_card", Arguments: []byte(`{"amount":100}`)}
	h := Pending()
	if _, err := h.Sum(a); !errors.Is(err, ErrNoSecret) {
		t.Fatalf("Sum before the secret = %v; want ErrNoSecret", err)
	}
	if err := h.SetSecret([]byte("short")); err == nil {
		t.Fatal("SetSecret took a 5-byte secret")
	}
	secret := []byte("0123456789abcdef0123")
	if err := h.SetSecret(secret); err != nil {
		t.Fatal(err)
	}
	keyed, err := New(secret)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := keyed.Sum(a)
	if got, err := h.Sum(a); err != nil || got != want {
		t.Fatalf("Sum after the secret = %q, %v; want %q, as a Hasher made with it", got, err, want)
	}
	if err := h.SetSecret([]byte("another secret, longer")); err == nil {
		t.Fatal("SetSecret replaced a secret")
	}
}

// BenchmarkSum fingerprints the action of BenchmarkPath's new execution
// (internal/proxy). GODEBUG=cpu.sha=off shows what the processor's SHA
// instructions save, where it has them: valgrind offers none, and
// bench/instructions.sh counts Go's other SHA-256 code for that reason.
func BenchmarkSum(b *testing.B) {
	h := newHasher(b)
	a := Action{Actor: "a", Scope: "s", Upstream: "u", Tool: "charge_card",
		Arguments: json.RawMessage(`{"card":"4242-0000-0000-000017","amount":17}`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Sum(a); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSumValid is BenchmarkSum for arguments known to be valid JSON,
// as the interceptor fingerprints a tools/call's.
func BenchmarkSumValid(b *testing.B) {
	h := newHasher(b)
	a := Action{Actor: "a", Scope: "s", Upstream: "u", Tool: "charge_card",
		Arguments: json.RawMessage(`{"card":"4242-0000-0000-000017","amount":17}`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.SumValid(a); err != nil {
			b.Fatal(err)
		}
	}
}
