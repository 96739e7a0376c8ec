// Package journal keeps the activity journal (DESIGN.md section 9): an
// append-only file of one JSON object per line, one line per transition of
// an execution, each line carrying the SHA-256 of the line before it. The
// chain lets Verify (`mcp-idempotent audit verify FILE`) find, offline, the
// first line that was changed, removed or inserted after it was written.
//
// It is a leaf: it imports no other internal package. The interceptor
// decides what an Entry holds, and how much of a call's arguments and
// result it shows (the tool's policy); this package only chains and
// checks lines.
//
// # Line format
//
// Each line is a JSON object whose first member is "prev", the lowercase
// hex SHA-256 of the previous line's bytes without its newline; the first
// line of a journal has Genesis instead. The other members are Entry's.
// Every line ends in a newline, so a last line without one is torn: its
// write was cut short.
//
// Every entry line names its writer (Entry.Writer): the host and process
// id that wrote it, and the proxy's owner name or the operator, so that
// the journals of several processes that share one store can be merged
// by time and each line traced to its process. Lines written before
// writers were named have no writer member; they verify all the same,
// since the chain covers a line's bytes whatever its members.
//
// # What the chain proves
//
// The chain is not keyed: it catches an edit in the middle of the file, a
// line removed or inserted, lines cut from its start, and a torn write, but
// not lines cut from its end, nor a writer who rewrites every line after
// the one it changed.
//
// Signed checkpoints (Options.Signer, Checkpoint) narrow that: a writer
// without the key can neither rewrite the lines a checkpoint covers nor
// cut the file inside them, and Check says how many lines come after the
// newest one, covered by nothing. A writer holding the key, or one who
// cuts the file below its newest checkpoint, is caught only by a
// checkpoint saved somewhere the proxy's host cannot write
// (CheckOptions.Since).
//
// # Durability and sharing
//
// Lines are written with one write call each into the operating system's
// cache and never synced: a line written survives a crash of the proxy
// (kill -9), not of the machine. The journal is an audit trail of what the
// store decided, and an fsync per transition would cost more than the
// store's own write; a machine crash may leave a torn last line, which Open
// then refuses, saying how to repair the file.
//
// One journal file belongs to one proxy process: two writers would each
// chain from their own view of the last line and fork the chain. Open takes
// an exclusive flock on the file where the system has one (Linux, macOS,
// the BSDs) and fails with ErrLocked if another process holds it; give each
// proxy its own file.
package journal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
)

// Genesis is the prev of a journal's first line: 64 zeros, a value that no
// line hashes to.
const Genesis = "0000000000000000000000000000000000000000000000000000000000000000"

// ErrLocked is returned by Open when another process holds the journal.
var ErrLocked = errors.New("another process is writing this journal")

// An Entry is one transition of one execution, or the start or end of a
// client session, as the journal shows it.
type Entry struct {
	// Time is when the execution entered State; Record writes it in UTC,
	// RFC 3339 with nanoseconds. Zero means the time of Record.
	Time time.Time `json:"time"`
	// Writer names the process that made the transition. Record fills
	// the members left empty with the Writer's own (Options.Writer).
	Writer Process `json:"writer"`
	// Execution, Tool and State are those of a transition's line; a
	// session's line (Event) has none.
	Execution string `json:"execution,omitempty"` // the execution id, exe_...
	Tool      string `json:"tool,omitempty"`
	State     string `json:"state,omitempty"`
	// Attempt counts the dispatches of the execution so far.
	Attempt     int    `json:"attempt,omitempty"`
	Upstream    string `json:"upstream,omitempty"`
	Actor       string `json:"actor,omitempty"`
	Scope       string `json:"scope,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"` // the intent fingerprint, hex
	// Request names the caller's request that caused the transition, as
	// logs name it; Session and RequestID say the same apart.
	Request string `json:"request,omitempty"`
	// Session is the client session the line is about or came from: the
	// proxy's session scope, session:...
	Session string `json:"session,omitempty"`
	// RequestID is the JSON-RPC id of the caller's request, as it came.
	RequestID json.RawMessage `json:"request_id,omitempty"`
	// Event marks a line about a session rather than an execution:
	// SessionStart or SessionEnd, with Client.
	Event  string         `json:"event,omitempty"`
	Client *SessionClient `json:"client,omitempty"`
	// Attach says what a caller that joined the execution (rather than
	// started it) got, on its delivered line or its Attached line.
	Attach *Attach `json:"attach,omitempty"`
	Note   string  `json:"note,omitempty"`
	// By and Via name, on the line of an approval's decision (authorized,
	// refused), who made it and through which channel (client,
	// operator, timeout, session-grant, proxy).
	By  string `json:"by,omitempty"`
	Via string `json:"via,omitempty"`
	// Shadow marks a proxy in shadow mode (--shadow): every call went
	// upstream as it came, and the line says what the proxy would have
	// done, a replay's delivery among them.
	Shadow bool `json:"shadow,omitempty"`
	// Arguments, Result and Error are the call's arguments, the tool's
	// result and the upstream's JSON-RPC error, where the transition has
	// one, shown as the tool's policy allows.
	Arguments *Value `json:"arguments,omitempty"`
	Result    *Value `json:"result,omitempty"`
	Error     *Value `json:"error,omitempty"`
}

// A Process names the writer of a journal line.
type Process struct {
	Host string `json:"host,omitempty"` // os.Hostname
	PID  int    `json:"pid,omitempty"`
	// Owner is the name a proxy gives itself in the records it runs
	// (the record's owner, proxy-...), where the writer is a proxy.
	Owner string `json:"owner,omitempty"`
	// Operator is the user who ran a command that made the transition,
	// such as activity resolve.
	Operator string `json:"operator,omitempty"`
}

// A Value is a JSON value as the journal may show it: in clear, as a keyed
// hash, or only as redacted. Exactly one member is set, so a reader tells
// a redacted value from a clear one without guessing.
type Value struct {
	Clear json.RawMessage `json:"clear,omitempty"`
	// HMAC is the hex HMAC-SHA-256 of the value, keyed as the caller
	// documents.
	HMAC     string `json:"hmac_sha256,omitempty"`
	Redacted bool   `json:"redacted,omitempty"`
}

// Defaults of Options.
const (
	DefaultCheckpointLines = 1000
	DefaultCheckpointEvery = time.Minute
)

// Options configure a Writer. The zero value writes no checkpoints.
type Options struct {
	// Signer, if set, signs a checkpoint (see Checkpoint) that the
	// Writer appends after every CheckpointLines lines, CheckpointEvery
	// after the first line no checkpoint covers, and at Close: whichever
	// comes first, and only while some line is not covered yet. Its name
	// is the checkpoints' origin.
	Signer          note.Signer
	CheckpointLines int           // 0 means DefaultCheckpointLines
	CheckpointEvery time.Duration // 0 means DefaultCheckpointEvery
	// Writer names this process in every line it writes; an empty Host
	// or PID means this host's name and this process's id.
	Writer Process
	// Lazy, with a Signer, leaves the lines the journal had when opened
	// that no checkpoint covers to the first Record or to Close: no
	// timer signs them meanwhile. For a command that writes one line and
	// ends, whose Abandon then leaves the journal as it found it however
	// long the command took.
	Lazy bool
}

// A Writer appends entries to a journal file. It is safe for concurrent
// use: lines are written one at a time, in the order Record is called.
type Writer struct {
	path   string
	signer note.Signer // nil: no checkpoints
	every  time.Duration
	most   int // lines a checkpoint may leave uncovered
	self   Process
	// links is set where the file system counts the file's names: a file
	// just opened by its name has one, unless it reports none at all.
	links bool

	mu   sync.Mutex // guards the fields below
	f    *os.File
	prev string // hex SHA-256 of the last line, or Genesis
	// looked is when write last looked whether the file was removed;
	// gone, that it was, for good; unseen counts the lines written
	// since that look.
	looked time.Time
	gone   bool
	unseen int
	lines  int // lines in the file
	// unsigned counts the lines after the newest checkpoint.
	unsigned int
	// timer, while set, writes a checkpoint when it fires; it is set
	// while unsigned > 0. gen counts the timers set, so a timer stopped
	// too late to stop its tick finds itself stale.
	timer *time.Timer
	gen   int
	// err, once set, refuses every later Record: the file is closed, or a
	// write was cut short and its tail is no longer a line to chain from.
	err error
}

// Open opens the journal at path for appending, creating it (mode 0600) if
// it does not exist. An existing journal's chain is continued from its
// last line, which must be whole and must name the line before it: Open
// refuses a torn or broken tail rather than fork the chain, with an error
// naming the file and line. Open reads the whole file once to find its
// tail (hashing it, not parsing it); `audit verify` checks every line.
func Open(path string) (*Writer, error) {
	return OpenWith(path, Options{})
}

// OpenWith is Open with options. With a signer, lines an earlier process
// left after the newest checkpoint are signed like new ones.
func OpenWith(path string, opts Options) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening journal: %w", err)
	}
	if err := regular(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("opening journal %s: %w", path, err)
	}
	if err := lock(f); err != nil {
		f.Close()
		if errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("opening journal %s: %w (it holds the file's lock); several proxies must not share one journal: give each its own file", path, err)
		}
		return nil, fmt.Errorf("locking journal %s: %w", path, err)
	}
	prev, lines, unsigned, err := tail(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening journal %s: %w", path, err)
	}
	w := &Writer{path: path, f: f, prev: prev, lines: lines, unsigned: unsigned,
		signer: opts.Signer, every: opts.CheckpointEvery, most: opts.CheckpointLines, self: opts.Writer, links: !removed(f)}
	if w.self.Host == "" {
		w.self.Host, _ = os.Hostname() // a host without a name leaves it out
	}
	if w.self.PID == 0 {
		w.self.PID = os.Getpid()
	}
	if w.every <= 0 {
		w.every = DefaultCheckpointEvery
	}
	if w.most <= 0 {
		w.most = DefaultCheckpointLines
	}
	if w.signer != nil && w.unsigned > 0 && !opts.Lazy {
		w.mu.Lock()
		w.arm()
		w.mu.Unlock()
	}
	return w, nil
}

// OpenRead opens the journal at path for reading, as Open does a
// journal it appends to: only a regular file.
func OpenRead(path string) (*os.File, error) {
	// Looked at before it is opened: opening a named pipe to read
	// waits for a writer.
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s), as a journal must be", path, fileKind(fi.Mode()))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if err := regular(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// regular refuses f unless it is a regular file. A journal is one, and
// a device such as /dev/zero is one endless line: reading it to find its
// last line took all the memory there was.
func regular(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s), as a journal must be", fileKind(fi.Mode()))
	}
	return nil
}

// fileKind names what a file that is not a regular one is.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "a " + m.Type().String()
}

// tail reads a journal from its start and returns the hash of its last
// line (Genesis for an empty file), how many lines it has, and how many
// of them come after its newest checkpoint. The last line must be whole
// and its prev must be the hash of the line before it.
func tail(f *os.File) (prev string, lines, unsigned int, err error) {
	r := newLineReader(io.NewSectionReader(f, 0, 1<<62))
	prev = Genesis
	var before string // the hash of the line before the last
	var last []byte
	// filled and end count the lines up to the last that is not empty,
	// and the bytes they take.
	var filled int
	var end int64
	for {
		line, torn, err := r.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", 0, 0, fmt.Errorf("reading line %d: %w", lines+1, err)
		}
		if torn {
			if err := chained(lines, last, before, line); err != nil {
				return "", 0, 0, err
			}
			return "", 0, 0, &LineError{Line: lines + 1, Reason: tornReason(lines, r.start)}
		}
		before, prev = prev, sum(line)
		last = append(last[:0], line...)
		lines++
		unsigned++
		if len(line) > 0 {
			filled, end = lines, r.offset
		}
		if isCheckpointLine(line) {
			unsigned = 0
		}
	}
	if lines == 0 {
		return Genesis, 0, 0, nil
	}
	if len(last) == 0 && filled > 0 {
		// Added after the journal's lines, as by echo >> FILE: say how
		// to take them off, as for a torn line.
		keep := fmt.Sprintf("its first %d lines", filled)
		if filled == 1 {
			keep = "its first line"
		}
		return "", 0, 0, &LineError{Line: lines, Reason: fmt.Sprintf(
			"empty line, which no writer of a journal writes: cut the file to %s (truncate -s %d FILE), then check it with `mcp-idempotent audit verify`", keep, end)}
	}
	got, err := prevOf(last)
	switch {
	case err != nil:
		return "", 0, 0, &LineError{Line: lines, Reason: err.Error() + "; the chain cannot be continued from it: check the file with `mcp-idempotent audit verify`"}
	case got != before:
		// Nothing in the file mends this: a new journal is the way on.
		return "", 0, 0, &LineError{Line: lines, Reason: notChained(lines) + "; the chain cannot be continued from it: check the file with `mcp-idempotent audit verify`, then start a new journal (move the file away, or name another)"}
	}
	return prev, lines, unsigned, nil
}

// chained reports, as an error, a file whose last whole line, line n,
// does not chain from the one before it (whose hash is before), or that
// has none and a torn line that cannot begin one: the file is then not a
// journal whose torn line cutting would mend, and no one should be told
// to cut it.
func chained(n int, last []byte, before string, torn []byte) error {
	if n == 0 {
		if !bytes.HasPrefix(torn, []byte("{")) {
			return notJournal(1, errors.New("not a JSON object"))
		}
		return nil
	}
	if got, err := prevOf(last); err != nil || got != before {
		return notJournal(n, err)
	}
	return nil
}

// notChained says why line n's prev is wrong. The first line has no
// line before it: its prev must be Genesis.
func notChained(n int) string {
	if n == 1 {
		return "its prev is not the genesis value (64 zeros), as a journal's first line's is: lines before it were removed"
	}
	return "its prev is not the SHA-256 of the line before it"
}

// notJournal is the error of a file whose line n is not a journal's.
func notJournal(n int, err error) error {
	why := notChained(n)
	if err != nil {
		why = err.Error()
	}
	return &LineError{Line: n, Reason: why + "; is the file a journal? Check it with `mcp-idempotent audit verify`"}
}

// maxClearDepth is the deepest a value in clear may nest: a line holds
// it two levels down, and Go's JSON decoder, Verify's, reads no line
// nested more than 10,000 deep. An answer may hold one deeper than the
// line allows, being one level shallower.
const maxClearDepth = 10000 - 2

// readable returns v, or, if it shows a value in clear that nests deeper
// than maxClearDepth, v redacted: written as it is, the line would be
// one that Verify, and every reader with Go's limit, refuses, and the
// journal could never be continued from it.
func readable(v *Value) *Value {
	if v == nil || v.Clear == nil || depth(v.Clear) <= maxClearDepth {
		return v
	}
	return &Value{Redacted: true}
}

// depth returns how deep the JSON value raw nests its arrays and objects.
func depth(raw []byte) int {
	d, most, inString := 0, 0, false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case inString && c == '\\':
			i++ // the escaped byte
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			d++
			most = max(most, d)
		case c == ']' || c == '}':
			d--
		}
	}
	return most
}

// Record appends e as one line. The line is written with one write call,
// so a reader never sees half of it unless the write itself failed. An
// error means the line is not in the journal. A write cut short is cut
// off the file again; where that fails, every later Record fails too, so
// the chain is never continued from a torn line. A checkpoint due after
// the line goes in the same write.
func (w *Writer) Record(e Entry) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	e.Writer.fill(w.self)
	e.Arguments, e.Result, e.Error = readable(e.Arguments), readable(e.Result), readable(e.Error)
	// Encoded outside the lock; only the prev member waits for it.
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encoding journal entry of %s: %w", e.Execution, err)
	}
	if !utf8.Valid(body) {
		// A value in clear (json.RawMessage) keeps the bytes it came
		// with, which json.Marshal does not mend as it does a string's.
		// JSON text is UTF-8 (RFC 8259), and strict readers refuse a
		// line that is not.
		body = bytes.ToValidUTF8(body, []byte("\uFFFD"))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	line := make([]byte, 0, len(`{"prev":"`)+len(Genesis)+2+len(body))
	line = append(line, `{"prev":"`...)
	line = append(line, w.prev...)
	line = append(line, `",`...)
	line = append(line, body[1:]...) // body is an object with members: Time is always there
	next, added := sum(line), 1
	line = append(line, '\n')
	if w.signer != nil && w.unsigned+1 >= w.most {
		ckpt, err := w.checkpoint(next, w.lines+1)
		if err != nil {
			return err
		}
		line = append(line, ckpt...)
		next, added = sum(ckpt[:len(ckpt)-1]), 2
	}
	if err := w.write(line, next, added); err != nil {
		return err
	}
	switch {
	case added == 2:
		w.signed()
	case w.signer != nil:
		w.unsigned++
		if w.timer == nil {
			w.arm()
		}
	}
	return nil
}

// fill sets p's empty members to those of self.
func (p *Process) fill(self Process) {
	if p.Host == "" {
		p.Host = self.Host
	}
	if p.PID == 0 {
		p.PID = self.PID
	}
	if p.Owner == "" {
		p.Owner = self.Owner
	}
	if p.Operator == "" {
		p.Operator = self.Operator
	}
}

// lookRemovedEvery is how often write looks whether the journal file was
// removed: a look is a system call and an allocation, which on every line
// more than doubled a write's cost. Lines written in between are lost all
// the same, and counted in the error of the look that finds it.
const lookRemovedEvery = time.Second

// write writes lines, the last of which hashes to next, in one write
// call, and counts added lines. w.mu is held.
func (w *Writer) write(lines []byte, next string, added int) error {
	if w.links && !w.gone {
		if now := time.Now(); now.Sub(w.looked) >= lookRemovedEvery {
			if w.gone = removed(w.f); w.gone && w.unseen > 0 {
				// Written without an error, maybe to no file anyone
				// reads: the one error that can say so.
				return fmt.Errorf("%w; the %d lines written since %s, when it was last seen, may be in no other file", w.goneErr(), w.unseen, w.looked.UTC().Format(time.RFC3339Nano))
			}
			w.looked, w.unseen = now, 0
		}
	}
	if w.gone {
		// Written or not, the line would be lost without a word: say so,
		// so that each transition is logged and counted.
		return w.goneErr()
	}
	n, err := w.f.Write(lines)
	switch {
	case err == nil:
		w.prev = next
		w.lines += added
		w.unseen += added
		return nil
	case n == 0:
		// Nothing reached the file: the chain still ends at the last line.
		return fmt.Errorf("writing journal %s: %w", w.path, err)
	}
	// A full disk mostly cuts a write short rather than refuse it whole:
	// the page it ends in had room. Cut what was written off again, so
	// that the journal takes lines once there is room, not never.
	cerr := cutWritten(w.f, n)
	if cerr == nil {
		return fmt.Errorf("writing journal %s: %w (the part of the line written was cut off again: the chain still ends at line %d)", w.path, err, w.lines)
	}
	w.err = fmt.Errorf("writing journal %s: line %d was cut short (%v); no more lines are written, so the chain is not forked: cut the torn line off the file and restart", w.path, w.lines+1, errors.Join(err, cerr))
	return w.err
}

// cutWritten cuts off the end of f the n bytes that a write cut short
// appended. The file's offset is the end of what that write wrote, even
// under O_APPEND, and the journal's lock keeps other writers out.
func cutWritten(f *os.File, n int) error {
	end, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != end {
		// Cut meanwhile (copytruncate): a truncate to a size past
		// its end would fill the file with zeros.
		return fmt.Errorf("the file is %d bytes, not the %d the write left", fi.Size(), end)
	}
	return f.Truncate(end - int64(n))
}

// goneErr is write's error once the file was found removed.
func (w *Writer) goneErr() error {
	return fmt.Errorf("writing journal %s: the file was removed while this process had it open, so no line reaches it: restart the process to start a new journal there", w.path)
}

// checkpoint returns the checkpoint line, newline included, that signs
// the first size lines of the journal, the last of which hashes to last.
func (w *Writer) checkpoint(last string, size int) ([]byte, error) {
	line, err := signCheckpoint(w.signer, last, size)
	if err != nil {
		return nil, fmt.Errorf("signing a checkpoint of journal %s: %w", w.path, err)
	}
	return append(line, '\n'), nil
}

// signCovered appends a checkpoint if a line is not covered by one.
// w.mu is held.
func (w *Writer) signCovered() error {
	if w.signer == nil || w.unsigned == 0 || w.err != nil {
		return nil // nothing to sign, or a file not to write to
	}
	ckpt, err := w.checkpoint(w.prev, w.lines)
	if err != nil {
		return err
	}
	if err := w.write(ckpt, sum(ckpt[:len(ckpt)-1]), 1); err != nil {
		return err
	}
	w.signed()
	return nil
}

// signed notes that a checkpoint covers every line. w.mu is held.
func (w *Writer) signed() {
	w.unsigned = 0
	w.disarm()
}

// arm sets the timer of the next checkpoint. w.mu is held.
func (w *Writer) arm() {
	w.gen++
	gen := w.gen
	w.timer = time.AfterFunc(w.every, func() { w.tick(gen) })
}

// disarm stops the timer, if it is set. w.mu is held.
func (w *Writer) disarm() {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.gen++
}

// tick writes the checkpoint that CheckpointEvery made due, unless the
// timer gen was stopped meanwhile.
func (w *Writer) tick(gen int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gen != w.gen {
		return
	}
	w.timer = nil
	if err := w.signCovered(); err != nil && w.err == nil {
		// Nothing was written (a full disk): try again later, and
		// meanwhile the next Record may too.
		w.arm()
	}
}

// Close closes the journal file, releasing its lock. With a signer, it
// first appends a checkpoint covering every line, unless one does. Record
// fails after it.
func (w *Writer) Close() error {
	return w.close(true)
}

// Abandon closes the journal file as Close does, but appends no
// checkpoint: for a command whose change did not happen, which leaves
// the journal as it found it.
func (w *Writer) Abandon() error {
	return w.close(false)
}

func (w *Writer) close(sign bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if errors.Is(w.err, os.ErrClosed) {
		return nil
	}
	var signErr error
	if sign {
		signErr = w.signCovered()
	}
	w.disarm()
	w.err = fmt.Errorf("writing journal %s: %w", w.path, os.ErrClosed)
	return errors.Join(signErr, w.f.Close())
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "..."
	}
	return h
}

// sum returns the hex SHA-256 of a line without its newline.
func sum(line []byte) string {
	s := sha256.Sum256(line)
	return hex.EncodeToString(s[:])
}

// prevOf checks that line is one JSON object with no member twice and a
// prev member of 64 lowercase hex digits, and returns that prev.
func prevOf(line []byte) (string, error) {
	prev, _, err := parseLine(line)
	return prev, err
}

func isHash[T string | []byte](s T) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// tornReason says what to do with a journal whose line after its first
// whole lines is torn, starting at byte offset.
func tornReason(whole int, offset int64) string {
	const torn = "torn: it does not end in a newline (a write was cut short); "
	switch whole {
	case 0:
		return torn + "it is the file's only line: start a new journal (remove the file, or name another)"
	case 1:
		return fmt.Sprintf(torn+"to continue the chain, cut the file to its first line (truncate -s %d FILE), or start a new journal", offset)
	}
	return fmt.Sprintf(torn+"to continue the chain, cut the file to its first %d lines (truncate -s %d FILE), or start a new journal", whole, offset)
}
