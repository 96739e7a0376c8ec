package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// A LineError says which line of a journal does not verify, and why.
type LineError struct {
	Line   int // from 1
	Reason string
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// Verify reads a journal and checks every line: that it is whole (ends in
// a newline), that it is one JSON object with no member twice, and that its
// prev is the SHA-256 of the line before it (Genesis for the first). It
// returns the number of lines that verify, all of them when the error is
// nil; otherwise the error is a *LineError naming the first line that does
// not, or a read error.
//
// A link that does not hold says only that one of its two lines changed.
// Verify looks one line further to say which: if the next link holds, the
// later line is as its successor recorded it, so the earlier one changed
// (or lines after it were removed), and the earlier one is named; if the
// next link is broken too, the later line is named. A change to the last
// line's body cannot be seen: no line names it.
func Verify(r io.Reader) (int, error) {
	return verify(r, nil, false, nil)
}

// A verifiedLine is a line whose link to the line before it holds.
type verifiedLine struct {
	num       int    // from 1
	text      []byte // without its newline; valid during the visit only
	prev, sum string // its prev member, and its own SHA-256, in hex
	// checkpoint is its checkpoint member, if it has one.
	checkpoint json.RawMessage
}

// verify is Verify, calling visit (if not nil) on each line whose link
// holds, in order; an error from visit stops it. With stopAtTorn, a torn
// last line ends the journal instead of failing it (a proxy is writing
// it), and sets *leftOut.
func verify(r io.Reader, visit func(*verifiedLine) error, stopAtTorn bool, leftOut *bool) (int, error) {
	lr := newLineReader(r)
	want := Genesis
	n := 0
	// broken names a line whose link to the line before it does not
	// hold, until the line after it says which side of the link changed.
	var broken *LineError
	var brokenSum string   // the hash of the line whose link is broken
	brokenGenesis := false // its prev is Genesis, past line 1
	for {
		line, torn, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if torn && stopAtTorn && broken == nil {
			*leftOut = true
			break
		}
		num := n + 1
		if broken != nil {
			num = broken.Line + 1
		}
		if err != nil {
			return n, fmt.Errorf("reading line %d: %w", num, err)
		}
		var prev string
		var ckpt json.RawMessage
		var perr error
		if torn {
			perr = errors.New("torn: it does not end in a newline (a write was cut short)")
		} else {
			prev, ckpt, perr = parseLine(line)
		}
		if broken != nil {
			return judgeBroken(broken, brokenSum, brokenGenesis, prev, perr)
		}
		if perr != nil {
			return n, &LineError{Line: num, Reason: perr.Error()}
		}
		if prev != want {
			// A first line's prev past line 1: another journal, or a
			// copy of this one, was joined on after line num-1.
			broken, brokenGenesis, brokenSum = brokenLink(num, prev, want), prev == Genesis, sum(line)
			continue
		}
		want = sum(line)
		if visit != nil {
			if err := visit(&verifiedLine{num: num, text: line, prev: prev, sum: want, checkpoint: ckpt}); err != nil {
				return n, err
			}
		}
		n++
	}
	if broken != nil {
		return verifiedBefore(broken.Line), broken
	}
	return n, nil
}

// brokenLink is the error of line num, whose prev is not want, the
// SHA-256 of the line before it.
func brokenLink(num int, prev, want string) *LineError {
	switch {
	case num == 1:
		return &LineError{Line: num, Reason: fmt.Sprintf("its prev %s is not the genesis value (64 zeros): the lines before it were removed, or it was changed", short(prev))}
	case prev == Genesis:
		return &LineError{Line: num, Reason: fmt.Sprintf("its prev is the genesis value (64 zeros), as a journal's first line's is: it starts another journal, joined on after line %d", num-1)}
	}
	return &LineError{Line: num, Reason: fmt.Sprintf("its prev %s is not the SHA-256 of line %d, %s: line %d or line %d was changed, or lines were removed or inserted between them", short(prev), num-1, short(want), num-1, num)}
}

// judgeBroken is what verify returns once it has read the line after
// broken's, whose prev is prev, or perr if it cannot be read: that line
// tells which side of the broken link changed. brokenSum is the SHA-256
// of broken's line, and brokenGenesis says that its prev is Genesis.
func judgeBroken(broken *LineError, brokenSum string, brokenGenesis bool, prev string, perr error) (int, error) {
	if perr == nil && prev == brokenSum {
		if brokenGenesis {
			// The later line is intact and opens a chain of its
			// own: the earlier one is intact too.
			broken.Reason += fmt.Sprintf(", and line %d names it as it is", broken.Line+1)
			return verifiedBefore(broken.Line), broken
		}
		// The line after the broken link names the later line as it
		// is: the earlier one is what changed.
		return verifiedBefore(broken.Line - 1), earlierChanged(broken.Line)
	}
	if perr == nil && broken.Line > 1 {
		// Both links of the line are broken: it is what changed, or it
		// does not belong here.
		broken.Reason = fmt.Sprintf("its prev is not the SHA-256 of line %d, nor is its SHA-256 the prev of line %d: line %d was changed or inserted",
			broken.Line-1, broken.Line+1, broken.Line)
	}
	return verifiedBefore(broken.Line), broken
}

func verifiedBefore(line int) int { return max(line-1, 0) }

// earlierChanged is the error for a broken link into line m whose next
// link holds: line m is intact, so line m-1 changed, or for m == 1 the
// lines before it were cut.
func earlierChanged(m int) *LineError {
	if m == 1 {
		return &LineError{Line: 1, Reason: "its prev is not the genesis value (64 zeros), and line 2 names it as it is: the lines before it were removed"}
	}
	return &LineError{Line: m - 1, Reason: fmt.Sprintf(
		"it is not the line that line %d's prev names, while line %d is as line %d names it: line %d was changed, or lines after it were removed or inserted",
		m, m, m+1, m-1)}
}
