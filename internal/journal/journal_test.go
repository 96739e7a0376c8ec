package journal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

var t0 = time.Date(2026, 11, 29, 20, 0, 0, 123456789, time.FixedZone("CET", 3600))

func entry(i int) Entry {
	return Entry{
		Time: t0.Add(time.Duration(i) * time.Millisecond), Execution: fmt.Sprintf("exe_%03d", i),
		Tool: "charge_card", State: "accepted", Attempt: 1, Actor: "alice",
		Arguments: &Value{HMAC: strings.Repeat("ab", 32)},
	}
}

// write makes a journal of n entries and returns its path.
func write(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range n {
		if err := w.Record(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.SplitAfter(string(b), "\n")[:bytes.Count(b, []byte("\n"))]
}

func hash(line string) string {
	s := sha256.Sum256([]byte(strings.TrimSuffix(line, "\n")))
	return hex.EncodeToString(s[:])
}

func TestChain(t *testing.T) {
	path := write(t, 3)
	ls := lines(t, path)
	if len(ls) != 3 {
		t.Fatalf("%d lines, want 3", len(ls))
	}
	want := Genesis
	for i, l := range ls {
		var got struct {
			Prev      string `json:"prev"`
			Time      string `json:"time"`
			Execution string `json:"execution"`
			Arguments Value  `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if got.Prev != want {
			t.Errorf("line %d: prev %s, want %s", i+1, got.Prev, want)
		}
		if !strings.HasPrefix(l, `{"prev":"`) {
			t.Errorf("line %d does not begin with prev: %s", i+1, l)
		}
		if wantTime := entry(i).Time.UTC().Format(time.RFC3339Nano); got.Time != wantTime {
			t.Errorf("line %d: time %s, want %s (UTC)", i+1, got.Time, wantTime)
		}
		if got.Arguments.HMAC == "" || got.Arguments.Clear != nil || got.Arguments.Redacted {
			t.Errorf("line %d: arguments %+v; want the hash only", i+1, got.Arguments)
		}
		want = hash(l)
	}
	f, _ := os.Open(path)
	defer f.Close()
	if n, err := Verify(f); n != 3 || err != nil {
		t.Errorf("Verify = %d, %v; want 3, nil", n, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestReopenContinuesChain(t *testing.T) {
	path := write(t, 2)
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Record(entry(2)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	ls := lines(t, path)
	if len(ls) != 3 || !strings.Contains(ls[2], `"prev":"`+hash(ls[1])+`"`) {
		t.Fatalf("after reopening, line 3 does not chain from line 2:\n%s", strings.Join(ls, ""))
	}
	if n, err := Verify(strings.NewReader(strings.Join(ls, ""))); n != 3 || err != nil {
		t.Errorf("Verify = %d, %v; want 3, nil", n, err)
	}
}

func TestOpenRefusesABadTail(t *testing.T) {
	tests := []struct {
		name   string
		damage func(ls []string) string
		want   []string
	}{
		{"torn last line", func(ls []string) string { return strings.Join(ls, "") + `{"prev":"00` },
			[]string{"line 3", "torn", "truncate -s ", "first 2 lines"}},
		{"torn second line", func(ls []string) string { return ls[0] + `{"prev":"00` },
			[]string{"line 2", "torn", "truncate -s ", "its first line ("}},
		{"torn only line", func([]string) string { return `{"prev":"00` },
			[]string{"line 1", "torn", "only line", "start a new journal"}},
		{"last line does not chain", func(ls []string) string {
			at := len(`{"prev":"`)
			return tamper(ls, 2, at, flipHex(ls[1][at]))
		}, []string{"line 2", "not the SHA-256 of the line before it", "audit verify", "start a new journal"}},
		// The first line has no line before it: cut from the start, its
		// prev is not the genesis value, and that is what is wrong.
		{"only line cut from a journal", func(ls []string) string { return ls[1] },
			[]string{"line 1", "genesis value", "lines before it were removed", "audit verify", "start a new journal"}},
		{"last line is not JSON", func(ls []string) string { return ls[0] + "not json\n" },
			[]string{"line 2", "not valid JSON"}},
		// A file that is not a journal, given as one by mistake, is not
		// called torn: cutting it as advised would destroy it.
		{"not a journal, last line torn", func([]string) string { return "SQLite format 3\x00\x10\n\x00\x01{\"a\"" },
			[]string{"line 1", "not valid JSON", "is the file a journal?"}},
		{"not a journal, no newline", func([]string) string { return "SQLite format 3\x00\x10" },
			[]string{"line 1", "is the file a journal?"}},
		{"torn line after a line that does not chain", func(ls []string) string {
			at := len(`{"prev":"`)
			return tamper(ls, 2, at, flipHex(ls[1][at])) + `{"prev":"00`
		}, []string{"line 2", "not the SHA-256 of the line before it", "is the file a journal?"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := write(t, 2)
			damaged := tt.damage(lines(t, path))
			if err := os.WriteFile(path, []byte(damaged), 0o600); err != nil {
				t.Fatal(err)
			}
			w, err := Open(path)
			if err == nil {
				w.Close()
				t.Fatal("Open succeeded on a damaged tail; it must refuse to fork the chain")
			}
			for _, s := range append(tt.want, path) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Open: %v; want it to say %q", err, s)
				}
			}
			if !strings.HasPrefix(tt.name, "torn last line") && tt.name != "torn second line" && strings.Contains(err.Error(), "truncate") {
				t.Errorf("Open: %v; want no advice to cut a file that is not a journal's chain", err)
			}
			if tt.name == "torn last line" {
				// The advice must be right: cutting there leaves a journal
				// Open continues.
				size := int64(len(damaged) - len(`{"prev":"00`))
				if !strings.Contains(err.Error(), fmt.Sprintf("truncate -s %d ", size)) {
					t.Errorf("Open: %v; want truncate -s %d", err, size)
				}
				os.Truncate(path, size)
				w, err := Open(path)
				if err != nil {
					t.Fatalf("after the advised truncate: %v", err)
				}
				w.Close()
			}
		})
	}
}

// TestOpenRefusesBlankLinesAtTheEnd: blank lines added after a journal's
// last line (echo >> FILE) are refused, as no writer writes one, with the
// truncate command that takes them off; after it, Open continues.
func TestOpenRefusesBlankLinesAtTheEnd(t *testing.T) {
	for _, blank := range []string{"\n", "\n\n"} {
		path := write(t, 2)
		whole, _ := os.ReadFile(path)
		os.WriteFile(path, append(whole, blank...), 0o600)
		_, err := Open(path)
		want := fmt.Sprintf("line %d: empty line, which no writer of a journal writes: cut the file to its first 2 lines (truncate -s %d FILE)", 2+len(blank), len(whole))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Open of a journal and %q = %v; want it to say %q", blank, err, want)
		}
		os.Truncate(path, int64(len(whole)))
		w, err := Open(path)
		if err != nil {
			t.Fatalf("after the advised truncate: %v", err)
		}
		w.Close()
	}
}

func TestOpenEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Record(entry(0))
	if ls := lines(t, path); len(ls) != 1 || !strings.Contains(ls[0], Genesis) {
		t.Errorf("the first line of an empty file does not chain from Genesis: %q", ls)
	}
}

func TestOneWriterPerFile(t *testing.T) {
	path := write(t, 1)
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Open(path)
	if err == nil {
		second.Close()
		w.Close()
		t.Skip("no flock on this system: one writer per file is the operator's to keep")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Errorf("a second Open: %v; want ErrLocked naming %s", err, path)
	}
	w.Close()
	// Closing releases the lock.
	third, err := Open(path)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	third.Close()
}

func TestRecordAfterClose(t *testing.T) {
	w, err := Open(filepath.Join(t.TempDir(), "j"))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := w.Record(entry(0)); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Record after Close = %v; want os.ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("a second Close = %v", err)
	}
}

// TestRecordAfterRemove: a journal removed while open takes no more
// lines, and Record says so rather than write them to no file.
func TestRecordAfterRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Record(entry(0)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if !removed(w.f) {
		t.Skip("this system does not tell a removed file")
	}
	w.mu.Lock()
	w.looked = time.Time{} // as if the last look were long ago
	w.mu.Unlock()
	for i := 1; i <= 2; i++ {
		if err := w.Record(entry(i)); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "removed") {
			t.Errorf("Record %d after the file was removed = %v; want an error naming %s and saying it was removed", i, err, path)
		}
	}
}

// TestRecordAfterRemoveSaysWhatWasLost: lines written between the
// file's removal and the look that finds it took no error; the error
// of that look says how many, so that they are not lost unsaid.
func TestRecordAfterRemoveSaysWhatWasLost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Record(entry(0)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if !removed(w.f) {
		t.Skip("this system does not tell a removed file")
	}
	w.mu.Lock()
	seen := w.looked
	w.looked = time.Now().Add(time.Hour) // no look until told
	w.mu.Unlock()
	for i := 1; i <= 2; i++ {
		if err := w.Record(entry(i)); err != nil {
			t.Fatalf("Record %d before the look = %v", i, err)
		}
	}
	w.mu.Lock()
	w.looked = seen.Add(-lookRemovedEvery) // as if it were long ago
	w.mu.Unlock()
	err = w.Record(entry(3))
	if err == nil || !strings.Contains(err.Error(), "removed") || !strings.Contains(err.Error(), "the 3 lines written since") {
		// The first line too: written after the look that saw the file.
		t.Errorf("Record at the look = %v; want it to say the file was removed, and that 3 lines may be lost", err)
	}
	if err := w.Record(entry(4)); err == nil || strings.Contains(err.Error(), "lines written since") {
		t.Errorf("Record after the look = %v; want the removal said, and the lost lines not counted again", err)
	}
}

// TestRecordKeepsLinesUTF8: a value in clear that is not UTF-8 is
// mended as a string's would be, so that every line is JSON a strict
// reader takes.
func TestRecordKeepsLinesUTF8(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e := entry(0)
	e.Result = &Value{Clear: json.RawMessage("{\"text\":\"ok \xff\xfe bytes\"}")}
	if err := w.Record(e); err != nil {
		t.Fatal(err)
	}
	w.Close()
	ls := lines(t, path)
	if !utf8.ValidString(ls[0]) || !strings.Contains(ls[0], "\"text\":\"ok \uFFFD bytes\"") {
		t.Errorf("line: %q; want it UTF-8, the bytes that were not made U+FFFD", ls[0])
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := Verify(f); n != 1 || err != nil {
		t.Errorf("Verify = %d, %v; want 1, nil", n, err)
	}
}

// TestRecordKeepsLinesReadable: a value in clear nested deeper than a
// line can hold it and still be read (an answer holds it a level higher)
// is redacted, so that the line, and the journal after it, verifies.
// Brackets inside strings do not count.
func TestRecordKeepsLinesReadable(t *testing.T) {
	nested := func(d int) json.RawMessage {
		return json.RawMessage(strings.Repeat("[", d) + `"[[[{{{"` + strings.Repeat("]", d))
	}
	path := filepath.Join(t.TempDir(), "j")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range []int{maxClearDepth, maxClearDepth + 1} {
		e := entry(i)
		e.Result = &Value{Clear: nested(d)}
		if err := w.Record(e); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	ls := lines(t, path)
	if !strings.Contains(ls[0], `"clear":[[[`) || !strings.Contains(ls[1], `"result":{"redacted":true}`) {
		t.Errorf("lines hold %.80q and %.80q; want the first value in clear, the second redacted", ls[0], ls[1])
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := Verify(f); n != 2 || err != nil {
		t.Errorf("Verify = %d, %v; want 2, nil", n, err)
	}
}

// TestConcurrentRecord: many goroutines of one process append to one
// journal; every line is whole and the chain holds (run with -race).
func TestConcurrentRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				e := entry(g*each + i)
				e.Result = &Value{Clear: json.RawMessage(`{"content":[{"type":"text","text":"` + strings.Repeat("x", 100*i) + `"}]}`)}
				if err := w.Record(e); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	w.Close()
	f, _ := os.Open(path)
	defer f.Close()
	if n, err := Verify(f); n != writers*each || err != nil {
		t.Errorf("Verify = %d, %v; want %d, nil", n, err, writers*each)
	}
}

// flipHex returns a different lowercase hex digit than c.
func flipHex(c byte) byte {
	if c == '0' {
		return '1'
	}
	return '0'
}

// tamper returns the journal with the byte at index i of line l (from 1)
// replaced by c.
func tamper(ls []string, l, i int, c byte) string {
	b := []byte(ls[l-1])
	b[i] = c
	out := append([]string(nil), ls...)
	out[l-1] = string(b)
	return strings.Join(out, "")
}

func TestVerify(t *testing.T) {
	ls := lines(t, write(t, 5))
	prevAt := len(`{"prev":"`) + 3 // a byte inside the prev value
	toolAt := strings.Index(ls[2], "charge_card") + 1
	tests := []struct {
		name     string
		in       string
		wantN    int
		wantLine int    // 0: no error
		want     string // in the error
	}{
		{"intact", strings.Join(ls, ""), 5, 0, ""},
		{"empty file", "", 0, 0, ""},
		{"one byte of a middle line's body", tamper(ls, 3, toolAt, 'X'), 2, 3, "line 3 was changed"},
		{"one byte of a middle line's prev", tamper(ls, 3, prevAt, flipHex(ls[2][prevAt])), 2, 3, "line 3 was changed or inserted"},
		{"one byte of the first line's body", tamper(ls, 1, toolAt, 'X'), 0, 1, "line 1 was changed"},
		{"a middle line removed", ls[0] + ls[1] + ls[3] + ls[4], 1, 2, "line 2 was changed, or lines after it were removed"},
		{"the first lines removed", ls[2] + ls[3] + ls[4], 0, 1, "the lines before it were removed"},
		{"lines swapped", ls[0] + ls[2] + ls[1] + ls[3] + ls[4], 1, 2, "line 2 was changed or inserted"},
		{"a line inserted", ls[0] + ls[1] + ls[0] + ls[2] + ls[3] + ls[4], 2, 3, "line 3 was changed or inserted"},
		{"the last line's prev", tamper(ls, 5, prevAt, flipHex(ls[4][prevAt])), 4, 5, "line 4 or line 5 was changed"},
		{"another journal joined on", strings.Join(ls[:3], "") + strings.Join(ls, ""), 3, 4, "it starts another journal, joined on after line 3, and line 5 names it"},
		{"another journal's first line last", strings.Join(ls[:3], "") + ls[0], 3, 4, "it starts another journal, joined on after line 3"},
		{"line ends converted to CRLF", strings.ReplaceAll(strings.Join(ls, ""), "\n", "\r\n"), 0, 1, "its line ends were converted"},
		{"saved with a byte order mark", "\xef\xbb\xbf" + strings.Join(ls, ""), 0, 1, "it starts with a byte order mark"},
		{"torn last line", strings.Join(ls, "") + `{"prev":`, 5, 6, "torn"},
		{"last newline missing", strings.TrimSuffix(strings.Join(ls, ""), "\n"), 4, 5, "torn"},
		{"bad JSON", ls[0] + "{\n", 1, 2, "not valid JSON"},
		{"blank line", ls[0] + "\n" + ls[1], 1, 2, "empty line"},
		{"not an object", `["` + Genesis + `"]` + "\n", 0, 1, "not a JSON object"},
		{"no prev", `{"time":"x"}` + "\n", 0, 1, "no prev member"},
		{"prev in capitals", `{"prev":"` + strings.ToUpper(strings.Repeat("ab", 32)) + `"}` + "\n", 0, 1, "64 lowercase hex"},
		{"prev twice", `{"prev":"` + Genesis + `","prev":"` + Genesis + `"}` + "\n", 0, 1, `"prev" appears twice`},
		{"prev twice, once escaped", `{"prev":"` + Genesis + `","pr\u0065v":"` + Genesis + `"}` + "\n", 0, 1, `"prev" appears twice`},
		{"another member twice", `{"tool":"a","prev":"` + Genesis + `","tool":"b"}` + "\n", 0, 1, `"tool" appears twice`},
		{"prev not a string", `{"prev":0}` + "\n", 0, 1, "64 lowercase hex"},
		{"trailing text", `{"prev":"` + Genesis + `"} x` + "\n", 0, 1, "not valid JSON"},
		{"trailing bytes", `{"prev":"` + Genesis + `"}}` + "\n", 0, 1, "not valid JSON"},
		{"white space around the object", " \t{ \"prev\" : \"" + Genesis + "\" } \r \n", 1, 0, ""},
		{"a member twice, once as a surrogate pair", `{"prev":"` + Genesis + `","\ud83d\ude00":1,"😀":2}` + "\n", 0, 1, `"😀" appears twice`},
		{"a member twice, spelled in bytes that are not UTF-8", `{"prev":"` + Genesis + `","a` + "\xff" + `":1,"a\ufffd":2}` + "\n", 0, 1, "\"a\ufffd\" appears twice"},
		{"bytes that are not UTF-8 in a value", `{"prev":"` + Genesis + `","tool":"` + "\xff\xfe" + `"}` + "\n", 1, 0, ""},
		{"prev spelled with an escape", `{"prev":"\u0030` + Genesis[1:] + `"}` + "\n", 1, 0, ""},
		{"a control character in a string", `{"prev":"` + Genesis + `","tool":"a` + "\t" + `b"}` + "\n", 0, 1, "not valid JSON"},
		{"a bad escape", `{"prev":"` + Genesis + `","tool":"\x41"}` + "\n", 0, 1, "not valid JSON"},
		{"a number with a leading zero", `{"prev":"` + Genesis + `","attempt":01}` + "\n", 0, 1, "not valid JSON"},
		{"a number without digits after its point", `{"prev":"` + Genesis + `","attempt":1.}` + "\n", 0, 1, "not valid JSON"},
		{"a number with an empty exponent", `{"prev":"` + Genesis + `","attempt":1e+}` + "\n", 0, 1, "not valid JSON"},
		{"a number of every part", `{"prev":"` + Genesis + `","attempt":-0.5E+10}` + "\n", 1, 0, ""},
		{"nested as deep as JSON may", nested(maxDepth-1) + "\n", 1, 0, ""},
		{"nested deeper", nested(maxDepth) + "\n", 0, 1, "not valid JSON"},
		{"invalid JSON before a member twice", `{"prev":"` + Genesis + `","prev":1,"x":tru}` + "\n", 0, 1, "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := Verify(strings.NewReader(tt.in))
			if n != tt.wantN {
				t.Errorf("Verify = %d lines; want %d", n, tt.wantN)
			}
			checkLineError(t, "Verify", err, tt.wantLine, tt.want)
		})
	}
}

// TestVerifyLongLines: a line longer than the reader's buffer is one line.
func TestVerifyLongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e := entry(0)
	e.Arguments = &Value{Clear: json.RawMessage(`{"blob":"` + strings.Repeat("y", 300<<10) + `"}`)}
	for range 3 {
		if err := w.Record(e); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	w, err = Open(path) // its tail is read across buffer boundaries too
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	f, _ := os.Open(path)
	defer f.Close()
	if n, err := Verify(f); n != 3 || err != nil {
		t.Errorf("Verify = %d, %v; want 3, nil", n, err)
	}
}

// TestLongTornTailNotKept: a journal whose tail is tens of megabytes
// with no newline, as zeros a machine crash leaves, or a file that is no
// journal, is found torn by Open and Verify without being held in
// memory, and Open still names the offset to cut it at.
func TestLongTornTailNotKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Record(entry(0)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	const tornSize = 64 << 20
	if err := os.Truncate(path, fi.Size()+tornSize); err != nil { // sparse: no disk taken
		t.Fatal(err)
	}
	var err1, err2 error
	var n int
	allocated := allocatedBy(func() {
		_, err1 = Open(path)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		n, err2 = Verify(f)
	})
	if want := fmt.Sprintf("truncate -s %d FILE", fi.Size()); err1 == nil || !strings.Contains(err1.Error(), want) {
		t.Errorf("Open = %v; want it to say %q", err1, want)
	}
	checkLineError(t, "Verify", err2, 2, "torn")
	if n != 1 {
		t.Errorf("Verify = %d lines; want 1", n)
	}
	if allocated > tornSize/4 {
		t.Errorf("Open and Verify allocated %d MB for a torn line of %d MB; want it not kept", allocated>>20, tornSize>>20)
	}
}

// allocatedBy returns the bytes f allocates on the heap.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestVerifyLongLinesUnseekable: a long line of an input that cannot
// seek, such as a pipe, is read whole in one pass.
func TestVerifyLongLinesUnseekable(t *testing.T) {
	var b bytes.Buffer
	prev := Genesis
	for i := range 3 {
		line := fmt.Sprintf(`{"prev":"%s","n":%d,"blob":"%s"}`, prev, i, strings.Repeat("y", 200<<10))
		b.WriteString(line + "\n")
		prev = hash(line)
	}
	b.WriteString(`{"prev":"` + prev + `","torn":"` + strings.Repeat("z", 200<<10))
	n, err := Verify(&b)
	checkLineError(t, "Verify", err, 4, "torn")
	if n != 3 {
		t.Errorf("Verify = %d lines; want 3", n)
	}
}

func FuzzVerify(f *testing.F) {
	var good bytes.Buffer
	prev := Genesis
	for i := range 3 {
		line := fmt.Sprintf(`{"prev":"%s","n":%d}`, prev, i)
		good.WriteString(line + "\n")
		prev = hash(line)
	}
	f.Add(good.Bytes())
	f.Add([]byte(""))
	f.Add([]byte("\n"))
	f.Add([]byte(`{"prev":"` + Genesis + `"}`))
	f.Add([]byte(`{"prev":"` + Genesis + `","prev":1}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := Verify(bytes.NewReader(data))
		newlines := bytes.Count(data, []byte("\n"))
		if err == nil {
			if n != newlines || len(data) > 0 && data[len(data)-1] != '\n' {
				t.Fatalf("Verify = %d, nil for %d newlines in %q", n, newlines, data)
			}
			// A line chained to a journal that verifies verifies too.
			last := Genesis
			if n > 0 {
				ls := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
				last = hash(string(ls[len(ls)-1]))
			}
			more := append(bytes.Clone(data), `{"prev":"`+last+`"}`+"\n"...)
			if m, err := Verify(bytes.NewReader(more)); m != n+1 || err != nil {
				t.Fatalf("after appending a chained line: Verify = %d, %v; want %d, nil", m, err, n+1)
			}
			return
		}
		var le *LineError
		if !errors.As(err, &le) {
			t.Fatalf("Verify: %v is not a LineError", err)
		}
		if le.Line < 1 || le.Line > newlines+1 || n != le.Line-1 {
			t.Fatalf("Verify = %d, line %d, for %d newlines", n, le.Line, newlines)
		}
	})
}

// TestLinesNameTheirWriter: every line names the host and process that
// wrote it, and the owner or operator it was given; a journal begun
// before lines named their writer is continued, and verifies whole.
func TestLinesNameTheirWriter(t *testing.T) {
	// Two lines as a journal without writers has them.
	old := `{"prev":"` + Genesis + `","time":"2026-11-29T19:00:00Z","execution":"exe_1","tool":"charge_card","state":"accepted"}`
	old2 := `{"prev":"` + hash(old) + `","time":"2026-11-29T19:00:01Z","execution":"exe_1","tool":"charge_card","state":"dispatched"}`
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := os.WriteFile(path, []byte(old+"\n"+old2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWith(path, Options{Writer: Process{Operator: "ops"}})
	if err != nil {
		t.Fatal(err)
	}
	e := entry(2)
	e.Writer.Owner = "proxy-1"
	if err := w.Record(e); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	ls := lines(t, path)
	var got struct{ Writer Process }
	if err := json.Unmarshal([]byte(ls[2]), &got); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if want := (Process{Host: host, PID: os.Getpid(), Owner: "proxy-1", Operator: "ops"}); got.Writer != want {
		t.Errorf("the new line's writer is %+v; want %+v", got.Writer, want)
	}
	f, _ := os.Open(path)
	defer f.Close()
	if n, err := Verify(f); n != 3 || err != nil {
		t.Errorf("Verify of old lines and a new one = %d, %v; want 3, nil", n, err)
	}
}

// checkLineError checks err, what, a check, returned: nil when wantLine
// is 0, else a *LineError naming wantLine and saying want.
func checkLineError(t *testing.T, what string, err error, wantLine int, want string) {
	t.Helper()
	var le *LineError
	switch {
	case wantLine == 0 && err != nil:
		t.Errorf("%s: %v", what, err)
	case wantLine != 0 && (!errors.As(err, &le) || le.Line != wantLine || !strings.Contains(err.Error(), want)):
		t.Errorf("%s: %v; want a LineError for line %d saying %q", what, err, wantLine, want)
	}
}

// TestOpenRefusesWhatIsNoFile: a journal is a regular file. A device such
// as /dev/zero is one endless line, which reading for its last line, as
// Open and a verifier do, took all the memory there was: refused at once.
func TestOpenRefusesWhatIsNoFile(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero here")
	}
	if w, err := Open("/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		if w != nil {
			w.Close()
		}
		t.Fatalf("Open(/dev/zero) = %v; want it refused as not a regular file", err)
	}
	if f, err := OpenRead("/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		if f != nil {
			f.Close()
		}
		t.Fatalf("OpenRead(/dev/zero) = %v; want it refused as not a regular file", err)
	}
}
