package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// parseLineJSON is parseLine as encoding/json does it, the walk it
// replaced: what parseLine must agree with on every line.
func parseLineJSON(line []byte) (prev string, checkpoint json.RawMessage, err error) {
	if len(line) == 0 {
		return "", nil, errors.New("empty line")
	}
	if line[len(line)-1] == '\r' {
		return "", nil, errors.New("it ends in a carriage return (\\r\\n), which no writer of a journal writes: its line ends were converted, as by a copy through Windows or git; convert them back (dos2unix) and check it again")
	}
	if bytes.HasPrefix(line, []byte("\xef\xbb\xbf")) {
		return "", nil, errors.New("it starts with a byte order mark (bytes EF BB BF), which no writer of a journal writes: a program saved the file with one; take it out and check the file again")
	}
	if !json.Valid(line) {
		return "", nil, errors.New("not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return "", nil, errors.New("not a JSON object")
	}
	seen := make(map[string]bool)
	hasPrev := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", nil, errors.New("not valid JSON")
		}
		name, _ := tok.(string)
		if seen[name] {
			return "", nil, fmt.Errorf("member %q appears twice", name)
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return "", nil, errors.New("not valid JSON")
		}
		switch name {
		case "prev":
			if json.Unmarshal(v, &prev) != nil || len(prev) != 64 || strings.Trim(prev, "0123456789abcdef") != "" {
				return "", nil, errors.New("prev is not 64 lowercase hex digits")
			}
			hasPrev = true
		case "checkpoint":
			checkpoint = v
		}
	}
	if !hasPrev {
		return "", nil, errors.New("no prev member")
	}
	return prev, checkpoint, nil
}

// agree fails t unless parseLine and parseLineJSON say the same of line:
// the same error, or the same prev and checkpoint.
func agree(t *testing.T, line []byte) {
	t.Helper()
	prev, ckpt, err := parseLine(line)
	wantPrev, wantCkpt, wantErr := parseLineJSON(line)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || prev != wantPrev || !bytes.Equal(ckpt, wantCkpt) {
		t.Fatalf("parseLine(%q) = %q, %q, %v; encoding/json says %q, %q, %v", line, prev, ckpt, err, wantPrev, wantCkpt, wantErr)
	}
}

// nested is a line whose checkpoint member's value nests depth arrays,
// the top-level object making depth+1 levels.
func nested(depth int) string {
	return `{"prev":"` + Genesis + `","checkpoint":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
}

// lineSeeds are lines that reach each refusal of parseLine, and lines
// near them.
func lineSeeds(t testing.TB) []string {
	p := `{"prev":"` + Genesis + `"`
	seeds := []string{
		p + `}`,
		p + `,"checkpoint":"a\nb"}`,
		" \t" + p + ` , "checkpoint" : { "a" : [ 1 , -2.5e+3 , true , false , null , {} , [] ] } } ` + "\r ",
		p + `,"checkpoint":[1,2]}`,
		p + `,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18}`,
		`{"pr\u0065v":"` + Genesis + `"}`,
		`{"prev":"\u0030` + Genesis[1:] + `"}`,
		`{"prev":null}`,
		`{"prev":["` + Genesis + `"]}`,
		`{"prev":"` + Genesis + `" "tool":"x"}`,
		p + `,"\ud800":1,"\udc00":2}`,
		p + `,"\ud83d\ude00":1,"😀":2}`,
		p + `,"\ud83d\u0041":1,"\ufffdA":2}`,
		p + `,"` + "\xff" + `":1,"` + "\xfe" + `":2}`,
		p + `,"` + "\xed\xa0\x80" + `":1,"\ufffd\ufffd\ufffd":2}`,
		p + `,"\/\b\f\n\r\t\"\\":1,"/\u0008\u000c\u000A\u000D\u0009\u0022\u005C":2}`,
		p + `,"x":"` + "\x1f" + `"}`,
		p + `,"x":"` + "\x7f\x80" + `"}`,
		p + `,"x":"\x"}`,
		p + `,"x":"\u12"}`,
		p + `,"x":"\'"}`,
		p + `,"x":01}`, p + `,"x":-}`, p + `,"x":1.}`, p + `,"x":.5}`, p + `,"x":1e}`, p + `,"x":1e+}`,
		p + `,"x":+1}`, p + `,"x":-0.0E-0}`, p + `,"x":1E5}`, p + `,"x":0x1}`, p + `,"x":Infinity}`, p + `,"x":NaN}`,
		p + `,"x":tru}`, p + `,"x":nulll}`, p + `,"x":True}`,
		p + `,}`, p + `,"x"}`, p + `,"x":}`, p + `,"x":[1,]}`, p + `,"x":[,1]}`, p + `,"x":{"a"}}`, p + `,"x":{"a":1,}}`,
		p + `}}`, p + `} {}`, p + `}` + "\x00", p, `{`, `}`, `{}`, ` `, "\r", "\xef\xbb\xbf" + p + `}`,
		`"x"`, `1`, `[]`, `null`, `[` + p + `}]`,
		nested(maxDepth - 1), nested(maxDepth),
		strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
		strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
		p + `,"checkpoint":` + strings.Repeat(`{"a":`, maxDepth-1) + "1" + strings.Repeat("}", maxDepth-1) + "}",
		p + `,"checkpoint":` + strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth) + "}",
	}
	if t, ok := t.(*testing.T); ok {
		for _, l := range lines(t, write(t, 3)) {
			seeds = append(seeds, strings.TrimSuffix(l, "\n"))
		}
	}
	return append(seeds, string(checkpointLine(Genesis, []byte("origin\n3\nAAAA\n\n— sig\n"))))
}

// TestParseLineAgrees checks parseLine against encoding/json on lines that
// reach each of its refusals, and on many mutations of them: the same
// verdict, the same prev and the same checkpoint member.
func TestParseLineAgrees(t *testing.T) {
	seeds := lineSeeds(t)
	for _, s := range seeds {
		agree(t, []byte(s))
	}
	// Bytes that matter to the grammar, and some that do not.
	const alphabet = "{}[]\",:\\/u0123456789abcdefABCDEF+-.eEtrunlfsx \t\r\x00\x1f\x7f\x80\xbf\xc3\xed\xff"
	rng := rand.New(rand.NewPCG(1, 2))
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	for range n {
		b := []byte(seeds[rng.IntN(len(seeds))])
		if len(b) > 2000 {
			continue // the deep ones: their seeds suffice
		}
		for range 1 + rng.IntN(3) {
			b = mutate(rng, b, alphabet)
		}
		agree(t, b)
	}
}

// mutate changes, inserts, removes or repeats bytes of b.
func mutate(rng *rand.Rand, b []byte, alphabet string) []byte {
	if len(b) == 0 {
		return []byte{alphabet[rng.IntN(len(alphabet))]}
	}
	i := rng.IntN(len(b))
	switch rng.IntN(5) {
	case 0, 1:
		b[i] = alphabet[rng.IntN(len(alphabet))]
	case 2:
		b = append(b[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[i:]...)...)
	case 3:
		b = append(b[:i], b[i+1:]...)
	case 4:
		j := i + rng.IntN(min(len(b)-i, 12)) + 1
		b = append(b[:j], append(bytes.Clone(b[i:j]), b[j:]...)...)
	}
	return b
}

// FuzzParseLine compares parseLine with encoding/json on any line.
func FuzzParseLine(f *testing.F) {
	for _, s := range lineSeeds(f) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		agree(t, line)
	})
}
