package journal

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// A Checkpoint is a signed statement that a journal's first Size lines
// end in a line whose SHA-256 is Hash. Its text is a signed note
// (golang.org/x/mod/sumdb/note) whose body is that of a C2SP
// tlog-checkpoint: the origin, the size, and the base64 hash, one per
// line. Its origin is the name of the key that signs it.
//
// In a journal, a checkpoint is a line of its own, chained like the rest:
//
//	{"prev":"<hex SHA-256 of line Size>","checkpoint":"<the signed note>"}
//
// with nothing else in it, so every byte of it is either signed or
// repeats what is signed; that is why the last line of a journal that
// ends in a checkpoint cannot be changed unseen. A line counts as a
// checkpoint when it has a checkpoint member; other lines never do.
type Checkpoint struct {
	Origin string
	Size   int // the lines it covers, from 1
	Hash   [sha256.Size]byte
	// Signer names the key whose signature verified, as name+hash; ""
	// when it was read without verifiers.
	Signer string
	// Line is the journal line that holds it; 0 for a checkpoint read on
	// its own.
	Line int
	Note []byte // the signed note, as written
}

// checkpointLine returns the journal line, without its newline, that
// holds the signed note after the line whose hash is prev. It is the
// only spelling of such a line: Check compares a checkpoint line with it
// byte for byte, as JSON could spell the same string many ways.
func checkpointLine(prev string, signed []byte) []byte {
	text, _ := json.Marshal(string(signed)) // a string always encodes
	line := make([]byte, 0, len(`{"prev":"","checkpoint":}`)+len(prev)+len(text))
	line = append(line, `{"prev":"`...)
	line = append(line, prev...)
	line = append(line, `","checkpoint":`...)
	line = append(line, text...)
	return append(line, '}')
}

// signCheckpoint returns the checkpoint line, without its newline, that
// signs the first size lines of a journal, the last of which hashes to
// last (hex).
func signCheckpoint(s note.Signer, last string, size int) ([]byte, error) {
	h, err := hex.DecodeString(last)
	if err != nil || len(h) != sha256.Size {
		return nil, fmt.Errorf("%q is not a hex SHA-256", last)
	}
	text := fmt.Sprintf("%s\n%d\n%s\n", s.Name(), size, base64.StdEncoding.EncodeToString(h))
	signed, err := note.Sign(&note.Note{Text: text}, s)
	if err != nil {
		return nil, err
	}
	return checkpointLine(last, signed), nil
}

// isCheckpointLine reports whether line begins as checkpointLine writes
// one: enough for a Writer to tell where its own checkpoints are, not to
// verify them.
func isCheckpointLine(line []byte) bool {
	const at = len(`{"prev":"`) + 2*sha256.Size
	return len(line) > at && bytes.HasPrefix(line, []byte(`{"prev":"`)) &&
		bytes.HasPrefix(line[at:], []byte(`","checkpoint":`))
}

// ParseCheckpoint reads a checkpoint's signed note. With verifiers, one
// of them must have signed it, under the name its origin gives; with nil
// verifiers its signatures are not checked.
func ParseCheckpoint(signed []byte, verifiers note.Verifiers) (*Checkpoint, error) {
	n, err := note.Open(signed, verifiers)
	if unverified, ok := errors.AsType[*note.UnverifiedNoteError](err); ok {
		if verifiers == nil {
			n, err = unverified.Note, nil
		} else {
			return nil, fmt.Errorf("it is not signed by the key given, only by %s: it was forged, or signed with another key", sigNames(unverified.Note.UnverifiedSigs))
		}
	}
	if bad, ok := errors.AsType[*note.InvalidSignatureError](err); ok {
		return nil, fmt.Errorf("its signature by %s+%08x does not verify: its text was changed, or the signature forged", bad.Name, bad.Hash)
	}
	if err != nil {
		return nil, fmt.Errorf("it is not a signed note: %w", err)
	}
	c := &Checkpoint{Note: signed}
	if err := c.parseText(n.Text); err != nil {
		return nil, err
	}
	if verifiers == nil {
		return c, nil
	}
	for _, s := range n.Sigs {
		if s.Name == c.Origin {
			c.Signer = fmt.Sprintf("%s+%08x", s.Name, s.Hash)
			return c, nil
		}
	}
	return nil, fmt.Errorf("its origin %q is not the name of the key that signed it, %s", c.Origin, sigNames(n.Sigs))
}

// parseText reads a checkpoint's body: origin, size and hash lines, and
// perhaps extension lines, which C2SP allows and this package never
// writes.
func (c *Checkpoint) parseText(text string) error {
	ls := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(ls) < 3 {
		return errors.New("its text is not an origin, a size and a hash, one per line")
	}
	c.Origin = ls[0]
	size, err := strconv.Atoi(ls[1])
	if err != nil || size < 1 || ls[1] != strconv.Itoa(size) {
		return fmt.Errorf("its size %q is not a count of lines", ls[1])
	}
	c.Size = size
	h, err := base64.StdEncoding.DecodeString(ls[2])
	if err != nil || len(h) != sha256.Size {
		return fmt.Errorf("its hash %q is not a base64 SHA-256", ls[2])
	}
	copy(c.Hash[:], h)
	return nil
}

// sigNames names the signers of sigs. A forger chooses the names of
// signatures no key given checks: one that a terminal would act on (a
// bidi control, a C1 control such as CSI) is quoted, not printed.
func sigNames(sigs []note.Signature) string {
	names := make([]string, len(sigs))
	for i, s := range sigs {
		name := s.Name
		if q := strconv.Quote(name); q[1:len(q)-1] != name {
			name = q
		}
		names[i] = fmt.Sprintf("%s+%08x", name, s.Hash)
	}
	return strings.Join(names, ", ")
}

// CheckOptions say what Check checks besides the chain.
type CheckOptions struct {
	// Verifiers check every checkpoint's signature; nil checks none.
	Verifiers note.Verifiers
	// Since is a checkpoint saved earlier: the journal must still hold
	// the line it signs, unchanged.
	Since *Checkpoint
	// StopAtTorn ends the journal before a torn last line, for a reader
	// of a journal that a proxy is writing.
	StopAtTorn bool
}

// A Report is what Check found in a journal that verifies.
type Report struct {
	Lines       int // lines that verify
	Checkpoints int
	Newest      *Checkpoint // nil without one
	// Torn says a torn last line was left out (CheckOptions.StopAtTorn).
	Torn bool
}

// Check checks a journal as Verify does, and every checkpoint in it: its
// note is well formed and, with opts.Verifiers, signed; it counts the
// lines before it; its hash is that of the line before it. It names, in
// a *LineError, the first line that does not verify.
//
// The lines after the newest checkpoint are covered by no signature:
// they can be cut or rewritten unseen. A journal cut below its newest
// checkpoint, or rewritten by someone holding the signing key, still
// checks; only a checkpoint kept elsewhere (opts.Since) catches that.
func Check(r io.Reader, opts CheckOptions) (*Report, error) {
	rep := &Report{}
	var since string
	if opts.Since != nil {
		since = hex.EncodeToString(opts.Since.Hash[:])
	}
	// mismatch is the saved checkpoint's line, found changed; signers,
	// those of the journal's checkpoints.
	var mismatch *LineError
	signers := make(map[string]bool)
	n, err := verify(r, func(l *verifiedLine) error {
		if opts.Since != nil && l.num == opts.Since.Size && l.sum != since {
			// Read on: the journal's own checkpoints tell whether the
			// saved one is another journal's.
			mismatch = &LineError{Line: l.num, Reason: fmt.Sprintf("its SHA-256 %s is not %s, which the saved checkpoint signs", short(l.sum), short(since))}
		}
		if l.checkpoint == nil {
			return nil
		}
		c, err := checkLine(l, opts.Verifiers)
		switch {
		case err != nil && mismatch != nil:
			return mismatch
		case err != nil:
			return &LineError{Line: l.num, Reason: "checkpoint: " + err.Error()}
		}
		signers[c.Signer] = true
		if mismatch == nil {
			rep.Checkpoints++
			rep.Newest = c
		}
		return nil
	}, opts.StopAtTorn, &rep.Torn)
	rep.Lines = n
	if mismatch != nil {
		rep.Lines = mismatch.Line - 1
		if why, ok := foreign(opts.Since, signers); ok {
			mismatch.Reason += fmt.Sprintf("; %s, or else the journal was changed at or before line %d and signed again with another key", why, mismatch.Line)
		} else {
			mismatch.Reason += fmt.Sprintf(": the journal was changed at or before line %d after the checkpoint was saved, and the chain written again (or the checkpoint is another journal's, signed with the same key)", mismatch.Line)
		}
		return rep, mismatch
	}
	if err != nil {
		return rep, err
	}
	if opts.Since != nil && n < opts.Since.Size {
		why := fmt.Sprintf("missing: the saved checkpoint counts %d lines, and the journal holds %d", opts.Since.Size, n)
		if other, ok := foreign(opts.Since, signers); ok {
			why += fmt.Sprintf("; %s, or else lines were cut from its end and the rest signed again with another key", other)
		} else {
			why += ": lines were cut from its end (or it is another journal)"
		}
		return rep, &LineError{Line: n + 1, Reason: why}
	}
	return rep, nil
}

// foreign says, of a saved checkpoint that a journal does not extend,
// that it is likely another journal's, if its key signed none of the
// journal's checkpoints (signers) and some key did: a checkpoint picked
// from another proxy's, not a journal rewritten.
func foreign(saved *Checkpoint, signers map[string]bool) (string, bool) {
	if saved.Signer == "" || len(signers) == 0 || signers[saved.Signer] {
		return "", false
	}
	names := slices.Sorted(maps.Keys(signers))
	return fmt.Sprintf("the saved checkpoint is signed by %s, and none of the journal's checkpoints is (they are by %s): it is likely another journal's",
		saved.Signer, strings.Join(names, ", ")), true
}

// checkLine checks the checkpoint that line l holds.
func checkLine(l *verifiedLine, verifiers note.Verifiers) (*Checkpoint, error) {
	var signed string
	if err := json.Unmarshal(l.checkpoint, &signed); err != nil {
		return nil, errors.New("it is not a JSON string")
	}
	c, err := ParseCheckpoint([]byte(signed), verifiers)
	if err != nil {
		return nil, err
	}
	c.Line = l.num
	// Unsigned, the checkpoint's own text may be what changed: only a
	// signature that verifies says the lines moved, not its count.
	var orText string
	if verifiers == nil {
		orText = ", or its own text was changed (--key tells which)"
	}
	switch {
	case c.Size > l.num-1:
		return nil, fmt.Errorf("it counts %d lines, more than the %d before it: lines were removed before it%s", c.Size, l.num-1, orText)
	case c.Size < l.num-1:
		return nil, fmt.Errorf("it counts %d lines, fewer than the %d before it: lines were inserted before it%s", c.Size, l.num-1, orText)
	case hex.EncodeToString(c.Hash[:]) != l.prev:
		return nil, fmt.Errorf("it signs a line %d whose SHA-256 is %s, and line %d's is %s: line %d or a line before it was changed, and the chain written again%s",
			c.Size, short(hex.EncodeToString(c.Hash[:])), c.Size, short(l.prev), c.Size, orText)
	case !bytes.Equal(l.text, checkpointLine(l.prev, []byte(signed))):
		return nil, errors.New("the line is not spelled as the proxy writes it (members added, or the note's JSON spelled otherwise): it was changed")
	}
	return c, nil
}
