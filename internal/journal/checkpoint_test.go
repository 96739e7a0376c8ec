package journal

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// newKey makes a key pair named name.
func newKey(t *testing.T, name string) (note.Signer, note.Verifiers) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, note.VerifierList(v)
}

// writeSigned makes a journal of n entries, signed by s every `every`
// lines and at Close, and returns its path.
func writeSigned(t *testing.T, s note.Signer, n, every int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	w, err := OpenWith(path, Options{Signer: s, CheckpointLines: every})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := w.Record(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkpointsAt returns the numbers of the lines that are checkpoints,
// and their sizes.
func checkpointsAt(t *testing.T, ls []string) (at, sizes []int) {
	t.Helper()
	for i, l := range ls {
		var m struct{ Checkpoint *string }
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m.Checkpoint == nil {
			continue
		}
		c, err := ParseCheckpoint([]byte(*m.Checkpoint), nil)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		at, sizes = append(at, i+1), append(sizes, c.Size)
	}
	return at, sizes
}

// TestCheckpointCadence: a checkpoint follows every Nth line that no
// checkpoint covers, and one at Close covers what is left; a Close with
// nothing left to cover adds none.
func TestCheckpointCadence(t *testing.T) {
	s, _ := newKey(t, "proxy1.example")
	tests := []struct {
		entries, every int
		at             []int
	}{
		{7, 3, []int{4, 8, 10}}, // e e e C e e e C e C(close)
		{6, 3, []int{4, 8}},     // the last one after line 7 covers all: Close adds none
		{2, 1000, []int{3}},     // only at Close
		{0, 3, nil},             // nothing to sign
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d entries every %d", tt.entries, tt.every), func(t *testing.T) {
			ls := lines(t, writeSigned(t, s, tt.entries, tt.every))
			at, sizes := checkpointsAt(t, ls)
			if fmt.Sprint(at) != fmt.Sprint(tt.at) {
				t.Fatalf("checkpoints at lines %v; want %v", at, tt.at)
			}
			for i, size := range sizes {
				if size != at[i]-1 {
					t.Errorf("the checkpoint at line %d counts %d lines; want %d", at[i], size, at[i]-1)
				}
			}
			// The chain covers checkpoint lines: Verify, which knows no
			// key, passes.
			if n, err := Verify(strings.NewReader(strings.Join(ls, ""))); n != len(ls) || err != nil {
				t.Errorf("Verify = %d, %v; want %d, nil", n, err, len(ls))
			}
		})
	}
}

// TestCheckpointEvery: a line no checkpoint covers is signed
// CheckpointEvery after it was written, though no more lines come; an
// idle journal gets no more checkpoints.
func TestCheckpointEvery(t *testing.T) {
	s, vs := newKey(t, "proxy1.example")
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "j")
		w, err := OpenWith(path, Options{Signer: s, CheckpointEvery: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		w.Record(entry(0))
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if n := len(lines(t, path)); n != 1 {
			t.Fatalf("%d lines before the minute is up; want 1", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if _, sizes := checkpointsAt(t, lines(t, path)); fmt.Sprint(sizes) != "[1]" {
			t.Fatalf("a minute after the line: checkpoints of sizes %v; want [1]", sizes)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(lines(t, path)); n != 2 {
			t.Fatalf("an idle hour later: %d lines; want 2 (no checkpoint of nothing new)", n)
		}
		w.Record(entry(1))
		time.Sleep(time.Minute)
		synctest.Wait()
		f, _ := os.Open(path)
		defer f.Close()
		rep, err := Check(f, CheckOptions{Verifiers: vs})
		if err != nil || rep.Checkpoints != 2 || rep.Newest.Line != 4 {
			t.Fatalf("Check = %+v, %v; want 2 checkpoints, the newest at line 4", rep, err)
		}
	})
}

// TestReopenSigns: lines an earlier process left unsigned (it crashed, or
// ran without a key) are covered by the next process's checkpoint.
func TestReopenSigns(t *testing.T) {
	s, vs := newKey(t, "proxy1.example")
	path := write(t, 3)
	w, err := OpenWith(path, Options{Signer: s})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if at, sizes := checkpointsAt(t, lines(t, path)); fmt.Sprint(at, sizes) != "[4] [3]" {
		t.Fatalf("checkpoints at %v of sizes %v; want one at line 4 of size 3", at, sizes)
	}
	// Reopened with every line covered: nothing to add.
	w, err = OpenWith(path, Options{Signer: s})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	f, _ := os.Open(path)
	defer f.Close()
	if rep, err := Check(f, CheckOptions{Verifiers: vs}); err != nil || rep.Lines != 4 || rep.Checkpoints != 1 {
		t.Fatalf("Check = %+v, %v; want 4 lines, 1 checkpoint", rep, err)
	}
}

// TestAbandonSignsNothing: Abandon closes a journal with lines no
// checkpoint covers without appending one, and Record fails after it.
func TestAbandonSignsNothing(t *testing.T) {
	s, _ := newKey(t, "proxy1.example")
	path := write(t, 3)
	w, err := OpenWith(path, Options{Signer: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Abandon(); err != nil {
		t.Fatal(err)
	}
	if n := len(lines(t, path)); n != 3 {
		t.Errorf("after Abandon the journal has %d lines; want the 3 it had", n)
	}
	if err := w.Record(entry(3)); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Record after Abandon = %v; want os.ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("Close after Abandon = %v; want nil", err)
	}
}

// TestLazySignsOnlyAtRecordOrClose: a Lazy writer, opened on lines no
// checkpoint covers, starts no timer for them: a command that waits
// longer than CheckpointEvery and is refused leaves the journal as it
// found it. Its Close signs them, and its first Record starts the timer.
// Without Lazy the timer signs them, as a restarted proxy needs; the
// writer's lock guards that timer (run with -race).
func TestLazySignsOnlyAtRecordOrClose(t *testing.T) {
	s, _ := newKey(t, "ops.example")
	synctest.Test(t, func(t *testing.T) {
		open := func(lazy bool) (*Writer, string) {
			path := write(t, 3)
			w, err := OpenWith(path, Options{Signer: s, CheckpointEvery: time.Minute, Lazy: lazy})
			if err != nil {
				t.Fatal(err)
			}
			return w, path
		}
		count := func(path string) int { return len(lines(t, path)) }

		// A command that waited an hour for its store, then was refused.
		w, path := open(true)
		time.Sleep(time.Hour)
		synctest.Wait()
		w.Abandon()
		if n := count(path); n != 3 {
			t.Errorf("Lazy, after an hour and Abandon: %d lines; want the 3 it had", n)
		}
		// Closed: the lines it found are signed.
		w, path = open(true)
		w.Close()
		if _, sizes := checkpointsAt(t, lines(t, path)); fmt.Sprint(sizes) != "[3]" {
			t.Errorf("Lazy, closed: checkpoints of sizes %v; want one of the 3 lines", sizes)
		}
		// Its first Record starts the timer, which signs them all.
		w, path = open(true)
		w.Record(entry(3))
		time.Sleep(time.Minute)
		synctest.Wait()
		if _, sizes := checkpointsAt(t, lines(t, path)); fmt.Sprint(sizes) != "[4]" {
			t.Errorf("Lazy, a minute after a Record: checkpoints of sizes %v; want one of the 4 lines", sizes)
		}
		w.Abandon()
		// Not Lazy: the timer signs what it found.
		w, path = open(false)
		time.Sleep(time.Minute)
		synctest.Wait()
		w.Abandon()
		if n := count(path); n != 4 {
			t.Errorf("not Lazy, a minute after opening: %d lines; want 4, the timer's checkpoint after the 3", n)
		}
	})
}

// TestCheckpointFormat: a checkpoint is a signed note that the public
// sumdb/note package opens, with a C2SP tlog-checkpoint body: origin (the
// key's name), line count, base64 SHA-256 of the last line it covers.
func TestCheckpointFormat(t *testing.T) {
	skey, vkey, _ := note.GenerateKey(rand.Reader, "proxy1.example")
	s, _ := note.NewSigner(skey)
	v, _ := note.NewVerifier(vkey)
	ls := lines(t, writeSigned(t, s, 2, 1000))
	var m struct{ Prev, Checkpoint string }
	json.Unmarshal([]byte(ls[2]), &m)
	n, err := note.Open([]byte(m.Checkpoint), note.VerifierList(v))
	if err != nil {
		t.Fatalf("note.Open: %v", err)
	}
	h := sha256.Sum256([]byte(strings.TrimSuffix(ls[1], "\n")))
	if want := "proxy1.example\n2\n" + base64.StdEncoding.EncodeToString(h[:]) + "\n"; n.Text != want {
		t.Errorf("note text %q; want %q", n.Text, want)
	}
	if m.Prev != hash(ls[1]) {
		t.Errorf("the checkpoint line's prev %s; want line 2's hash", m.Prev)
	}
}

// rechain gives every line from line from (counted from 1) on the prev
// that the line before it hashes to, as a writer who rewrites the file
// after changing a line would. A checkpoint line keeps its note, unless
// resign is set: then it is signed again, by resign, for its new place.
func rechain(t *testing.T, ls []string, from int, resign note.Signer) string {
	t.Helper()
	out := append([]string(nil), ls...)
	for i := from - 1; i < len(out); i++ {
		prev := Genesis
		if i > 0 {
			prev = hash(out[i-1])
		}
		if resign != nil && isCheckpointLine([]byte(out[i])) {
			line, err := signCheckpoint(resign, prev, i)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = string(line) + "\n"
			continue
		}
		at := len(`{"prev":"`)
		out[i] = out[i][:at] + prev + out[i][at+len(prev):]
	}
	return strings.Join(out, "")
}

// otherBase64 returns a base64 digit other than c.
func otherBase64(c byte) byte {
	if c == 'A' {
		return 'B'
	}
	return 'A'
}

// withoutCheckpoints drops the checkpoint lines and rechains the rest.
func withoutCheckpoints(t *testing.T, ls []string) string {
	var kept []string
	for _, l := range ls {
		if !isCheckpointLine([]byte(l)) {
			kept = append(kept, l)
		}
	}
	return rechain(t, kept, 1, nil)
}

func TestCheck(t *testing.T) {
	s, vs := newKey(t, "proxy1.example")
	other, _ := newKey(t, "proxy1.example") // same name, another key
	// e e e C4 e e e C8 e C10
	ls := lines(t, writeSigned(t, s, 7, 3))
	all := strings.Join(ls, "")
	// line 2 changed
	changed := strings.Replace(all, `"execution":"exe_001"`, `"execution":"exe_00X"`, 1)
	// inside the signature, past the key hash
	sigAt := len(ls[9]) - len(`\n"}`+"\n") - 10
	forged, _ := signCheckpoint(other, hash(ls[9]), 10)
	tooMany, _ := signCheckpoint(s, hash(ls[9]), 11)
	respelled := strings.Replace(ls[9], "—", `\u2014`, 1)
	hashAt := strings.Index(ls[9], `\n9\n`) + len(`\n9\n`) // its hash's first byte

	tests := []struct {
		name      string
		in        string
		verifiers note.Verifiers
		wantLine  int    // 0: no error
		want      string // in the error
		newest    int    // the newest checkpoint's line, when it passes
	}{
		{"intact", all, vs, 0, "", 10},
		{"intact, no key", all, nil, 0, "", 10},
		// Cut below the newest checkpoint: one file cannot tell; the
		// tail after the newest checkpoint left is what Check reports.
		{"last line removed", strings.Join(ls[:9], ""), vs, 0, "", 8},
		{"last 3 lines removed", strings.Join(ls[:7], ""), vs, 0, "", 4},
		{"a byte of the last line a checkpoint covers", tamper(ls, 9, strings.Index(ls[8], "exe_")+4, 'X'), vs, 10, "line 9 or line 10 was changed", 0},
		{"that byte, and the checkpoint's prev to match", rechain(t, strings.SplitAfter(tamper(ls, 9, strings.Index(ls[8], "exe_")+4, 'X'), "\n")[:10], 10, nil), vs, 10, "line 9 or a line before it was changed", 0},
		{"a byte of the last checkpoint's size", strings.Replace(all, `\n9\n`, `\n8\n`, 1), vs, 10, "does not verify: its text was changed", 0},
		{"a byte of the last checkpoint's signature", tamper(ls, 10, sigAt, otherBase64(ls[9][sigAt])), vs, 10, "does not verify", 0},
		{"the last checkpoint respelled", strings.Join(append(append([]string(nil), ls[:9]...), respelled), ""), vs, 10, "not spelled as the proxy writes it", 0},
		{"rewritten after line 2", rechain(t, strings.SplitAfter(changed, "\n")[:10], 3, nil), vs, 4, "line 3 or a line before it was changed", 0},
		{"rewritten after line 2, signed with another key", rechain(t, strings.SplitAfter(changed, "\n")[:10], 3, other), vs, 4, "not signed by the key given, only by proxy1.example+", 0},
		{"rewritten after line 2, checkpoints dropped", withoutCheckpoints(t, strings.SplitAfter(changed, "\n")[:10]), vs, 0, "", 0},
		{"a checkpoint forged with another key", all + string(forged) + "\n", vs, 11, "not signed by the key given", 0},
		{"a forged checkpoint, no key", all + string(forged) + "\n", nil, 0, "", 11},
		{"a checkpoint counting more lines than come before it", all + string(tooMany) + "\n", vs, 11, "counts 11 lines, more than the 10 before it", 0},
		// Unsigned, a count or hash that does not match may be the
		// checkpoint's own text changed: the error must not blame
		// the lines alone.
		{"a byte of the last checkpoint's size, no key", strings.Replace(all, `\n9\n`, `\n8\n`, 1), nil, 10, "lines were inserted before it, or its own text was changed", 0},
		{"a byte of the last checkpoint's hash, no key", tamper(ls, 10, hashAt, otherBase64(ls[9][hashAt])), nil, 10, "and the chain written again, or its own text was changed", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Check(strings.NewReader(tt.in), CheckOptions{Verifiers: tt.verifiers})
			if tt.wantLine == 0 {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				newest := 0
				if rep.Newest != nil {
					newest = rep.Newest.Line
					if signed := rep.Newest.Signer != ""; signed != (tt.verifiers != nil) {
						t.Errorf("Check: signer %q with verifiers %v", rep.Newest.Signer, tt.verifiers != nil)
					}
				}
				if newest != tt.newest {
					t.Errorf("Check: the newest checkpoint at line %d; want %d", newest, tt.newest)
				}
				return
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line != tt.wantLine || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check: %v; want a LineError for line %d saying %q", err, tt.wantLine, tt.want)
			}
			if tt.verifiers != nil && strings.Contains(err.Error(), "its own text") {
				t.Errorf("Check: %v; a signature that verifies vouches for the checkpoint's text", err)
			}
			if rep.Lines != tt.wantLine-1 {
				t.Errorf("Check: %d lines verify; want %d", rep.Lines, tt.wantLine-1)
			}
		})
	}
}

// TestCheckSince: a checkpoint saved elsewhere catches what no file can
// show by itself: a writer who holds the key and rewrites and re-signs
// every line after a change, and a file cut below its newest checkpoint.
func TestCheckSince(t *testing.T) {
	s, vs := newKey(t, "proxy1.example")
	ls := lines(t, writeSigned(t, s, 7, 3)) // e e e C4 e e e C8 e C10
	all := strings.Join(ls, "")
	rep, err := Check(strings.NewReader(strings.Join(ls[:8], "")), CheckOptions{Verifiers: vs})
	if err != nil {
		t.Fatal(err)
	}
	saved, err := ParseCheckpoint(rep.Newest.Note, vs) // the checkpoint at line 8: 7 lines
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.SplitAfter(strings.Replace(all, `"execution":"exe_001"`, `"execution":"exe_00X"`, 1), "\n")[:10]
	tests := []struct {
		name     string
		in       string
		wantLine int
		want     string
	}{
		{"intact", all, 0, ""},
		{"cut to the saved checkpoint", strings.Join(ls[:8], ""), 0, ""},
		{"rewritten after line 2 and signed again with the key", rechain(t, changed, 3, s), 7, "the journal was changed at or before line 7"},
		{"cut below the saved checkpoint", strings.Join(ls[:5], ""), 6, "the saved checkpoint counts 7 lines, and the journal holds 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Without the saved checkpoint, the file checks.
			if _, err := Check(strings.NewReader(tt.in), CheckOptions{Verifiers: vs}); err != nil {
				t.Fatalf("Check without Since: %v", err)
			}
			_, err := Check(strings.NewReader(tt.in), CheckOptions{Verifiers: vs, Since: saved})
			checkLineError(t, "Check", err, tt.wantLine, tt.want)
		})
	}
}

// TestCheckSinceOfAnotherJournal: a saved checkpoint of another proxy's
// journal, signed by another key than every checkpoint of the journal
// checked, is said to be likely another journal's, not only a rewrite.
func TestCheckSinceOfAnotherJournal(t *testing.T) {
	var signers [2]note.Signer
	var verifiers [2]note.Verifier
	for i, name := range []string{"proxy1.example", "proxy2.example"} {
		skey, vkey, err := note.GenerateKey(rand.Reader, name)
		if err != nil {
			t.Fatal(err)
		}
		if signers[i], err = note.NewSigner(skey); err != nil {
			t.Fatal(err)
		}
		if verifiers[i], err = note.NewVerifier(vkey); err != nil {
			t.Fatal(err)
		}
	}
	both := note.VerifierList(verifiers[:]...)
	// The newest checkpoint of a journal of proxy2's: 9 lines.
	other := strings.Join(lines(t, writeSigned(t, signers[1], 7, 3)), "")
	rep, err := Check(strings.NewReader(other), CheckOptions{Verifiers: both})
	if err != nil {
		t.Fatal(err)
	}
	saved, err := ParseCheckpoint(rep.Newest.Note, both)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		entries  int
		wantLine int
		want     string
	}{
		{"longer", 9, 9, "it is likely another journal's, or else the journal was changed at or before line 9"},
		{"shorter", 3, 5, "the journal holds 4; the saved checkpoint is signed by proxy2.example+"},
	} {
		journal := strings.Join(lines(t, writeSigned(t, signers[0], tt.entries, 3)), "")
		_, err := Check(strings.NewReader(journal), CheckOptions{Verifiers: both, Since: saved})
		checkLineError(t, tt.name, err, tt.wantLine, tt.want)
		if err != nil && !strings.Contains(err.Error(), "none of the journal's checkpoints is (they are by proxy1.example+") {
			t.Errorf("%s: %v; want it to name the journal's own signer", tt.name, err)
		}
	}
	// A journal with no checkpoint tells nothing of its signer.
	_, err = Check(strings.NewReader(strings.Join(lines(t, write(t, 9)), "")), CheckOptions{Verifiers: both, Since: saved})
	checkLineError(t, "unsigned", err, 9, "the journal was changed at or before line 9 after")
}

// TestCheckStopAtTorn: a reader of a journal being written stops before a
// half-written last line.
func TestCheckStopAtTorn(t *testing.T) {
	s, _ := newKey(t, "proxy1.example")
	in := strings.Join(lines(t, writeSigned(t, s, 2, 1000)), "") + `{"prev":"ab`
	if _, err := Check(strings.NewReader(in), CheckOptions{}); err == nil {
		t.Fatal("Check of a torn journal passed")
	}
	rep, err := Check(strings.NewReader(in), CheckOptions{StopAtTorn: true})
	if err != nil || rep.Lines != 3 || rep.Newest == nil || rep.Newest.Line != 3 || !rep.Torn {
		t.Fatalf("Check = %+v, %v; want 3 lines, the checkpoint at line 3, the torn line said left out", rep, err)
	}
	whole := strings.TrimSuffix(in, `{"prev":"ab`)
	if rep, err := Check(strings.NewReader(whole), CheckOptions{StopAtTorn: true}); err != nil || rep.Torn {
		t.Fatalf("Check of a whole journal = %+v, %v; want no torn line", rep, err)
	}
}

func TestParseCheckpointRefuses(t *testing.T) {
	s, vs := newKey(t, "proxy1.example")
	sign := func(text string) []byte {
		b, err := note.Sign(&note.Note{Text: text}, s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	h := base64.StdEncoding.EncodeToString(make([]byte, 32))
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"not a note", []byte("hello\n"), "not a signed note"},
		{"two lines", sign("proxy1.example\n3\n"), "an origin, a size and a hash"},
		{"size zero", sign("proxy1.example\n0\n" + h + "\n"), "not a count of lines"},
		{"size with a leading zero", sign("proxy1.example\n03\n" + h + "\n"), "not a count of lines"},
		{"short hash", sign("proxy1.example\n3\nAAAA\n"), "not a base64 SHA-256"},
		{"origin not the signer's", sign("other.example\n3\n" + h + "\n"), `origin "other.example" is not the name`},
		// A forger names its signature: one a terminal would act on is
		// quoted in the error, not printed as it is.
		{"forged by a name with controls", func() []byte {
			forger, _ := newKey(t, "evil\u202e\u009b2J")
			b, err := note.Sign(&note.Note{Text: "proxy1.example\n3\n" + h + "\n"}, forger)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}(), `only by "evil\u202e\u009b2J"+`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseCheckpoint(tt.in, vs); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseCheckpoint: %v; want an error saying %q", err, tt.want)
			}
		})
	}
}

// TestCheckKeyRotation: a journal signed by one key, then by its
// successor, checks with both keys given, and names the first checkpoint
// of the old key when only the new one is.
func TestCheckKeyRotation(t *testing.T) {
	var signers []note.Signer
	var verifiers []note.Verifier
	for range 2 {
		skey, vkey, _ := note.GenerateKey(rand.Reader, "proxy1.example")
		s, _ := note.NewSigner(skey)
		v, _ := note.NewVerifier(vkey)
		signers, verifiers = append(signers, s), append(verifiers, v)
	}
	path := writeSigned(t, signers[0], 2, 1000) // e e C3
	w, err := OpenWith(path, Options{Signer: signers[1]})
	if err != nil {
		t.Fatal(err)
	}
	w.Record(entry(2))
	w.Close() // e C5
	in := strings.Join(lines(t, path), "")
	rep, err := Check(strings.NewReader(in), CheckOptions{Verifiers: note.VerifierList(verifiers...)})
	if err != nil || rep.Checkpoints != 2 {
		t.Fatalf("Check with both keys = %+v, %v; want 2 checkpoints", rep, err)
	}
	var le *LineError
	if _, err := Check(strings.NewReader(in), CheckOptions{Verifiers: note.VerifierList(verifiers[1])}); !errors.As(err, &le) || le.Line != 3 {
		t.Fatalf("Check with the new key only = %v; want line 3 named", err)
	}
}

// FuzzCheck: Check never panics, is never more lenient than Verify, and
// says why in a LineError.
func FuzzCheck(f *testing.F) {
	skey, _, _ := note.GenerateKey(rand.Reader, "proxy1.example")
	s, _ := note.NewSigner(skey)
	path := filepath.Join(f.TempDir(), "j")
	w, _ := OpenWith(path, Options{Signer: s, CheckpointLines: 2})
	for i := range 3 {
		w.Record(entry(i))
	}
	w.Close()
	good, _ := os.ReadFile(path)
	f.Add(good)
	f.Add([]byte(`{"prev":"` + Genesis + `","checkpoint":1}` + "\n"))
	f.Add([]byte(`{"prev":"` + Genesis + `","checkpoint":"x\n1\n\n\u2014 x AAAA\n"}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := Check(bytes.NewReader(data), CheckOptions{})
		n, verr := Verify(bytes.NewReader(data))
		if err == nil {
			if verr != nil || rep.Lines != n {
				t.Fatalf("Check passed %d lines that Verify does not: %d, %v", rep.Lines, n, verr)
			}
			return
		}
		var le *LineError
		if !errors.As(err, &le) || rep.Lines != le.Line-1 {
			t.Fatalf("Check = %d lines, %v", rep.Lines, err)
		}
	})
}

// FuzzParseCheckpoint: a note that parses has a size of at least one and
// an origin on one line.
func FuzzParseCheckpoint(f *testing.F) {
	skey, _, _ := note.GenerateKey(rand.Reader, "proxy1.example")
	s, _ := note.NewSigner(skey)
	line, _ := signCheckpoint(s, Genesis, 3)
	var m struct{ Checkpoint string }
	json.Unmarshal(line, &m)
	f.Add([]byte(m.Checkpoint))
	f.Add([]byte("a\n1\nAAAA\n\n\u2014 a AAAAAAAA\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCheckpoint(data, nil)
		if err == nil && (c.Size < 1 || strings.Contains(c.Origin, "\n")) {
			t.Fatalf("ParseCheckpoint(%q) = %+v", data, c)
		}
	})
}
