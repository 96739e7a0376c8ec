package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
)

const auditUsage = `Usage:
  mcp-idempotent audit verify FILE... [--key VERIFIER_FILE] [--since CHECKPOINT_FILE]
        check activity journals (--journal FILE), each on its own: every
        line whole and chained to the one before it, every checkpoint well
        formed; with --key, every checkpoint signed by that key, and a
        warning for the lines after the newest one; with --since (one FILE
        only), that the journal still holds what a checkpoint saved
        earlier signs
  mcp-idempotent audit checkpoint FILE
        print the journal's newest checkpoint (a signed note), to keep on
        another host and give to audit verify --since later
  mcp-idempotent audit keygen NAME [--out FILE]
        make a key pair to sign checkpoints with (--journal-key): the signer
        key goes to FILE (default NAME.key, mode 0600, never overwritten),
        the verifier key to stdout

Flags:
  --key FILE     (verify) a file of verifier keys, one per line, as keygen
                 prints them; every checkpoint of each journal must be
                 signed by one of them
  --since FILE   (verify) a checkpoint saved earlier by audit checkpoint,
                 or a checkpoint line of the journal: the journal must
                 still hold the line it signs; needs --key, and one FILE
  --out FILE     (keygen) where the signer key goes
`

func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("audit: say verify, checkpoint or keygen")
	}
	switch args[0] {
	case "verify":
		return auditVerify(ctx, args[1:], stdout, stderr)
	case "checkpoint":
		return auditCheckpoint(args[1:], stdout)
	case "keygen":
		return auditKeygen(args[1:], stdout, stderr)
	}
	return usagef("audit: unknown subcommand %q", args[0])
}

// parseAudit parses an audit subcommand's flags, before or after its
// arguments, and checks that it has one argument, what.
func parseAudit(fs *flag.FlagSet, args []string, what string) (string, error) {
	fs.SetOutput(io.Discard)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return "", &usageError{msg: err.Error()}
	}
	if len(pos) != 1 {
		return "", usagef("%s takes one %s", fs.Name(), what)
	}
	return pos[0], nil
}

// auditVerify checks journals, each on its own. It needs no lock: a
// proxy may be appending, and then the last line may be read half
// written and be reported torn; every line before it is still checked.
func auditVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	keyFile := fs.String("key", "", "")
	sinceFile := fs.String("since", "", "")
	paths, err := parseInterspersed(fs, args)
	switch {
	case err != nil:
		return &usageError{msg: err.Error()}
	case len(paths) == 0:
		return usagef("audit verify takes one FILE or more")
	case slices.Contains(paths, ""):
		return errEmptyFile("audit verify")
	case *sinceFile != "" && *keyFile == "":
		return usagef("--since needs --key: a saved checkpoint is evidence only if its signature verifies")
	case *sinceFile != "" && len(paths) > 1:
		return usagef("--since takes one FILE: a saved checkpoint signs the lines of one journal; check each journal with its own")
	}
	var opts journal.CheckOptions
	if *keyFile != "" {
		if opts.Verifiers, err = readVerifiers(ctx, *keyFile); err != nil {
			return fmt.Errorf("--key: %w", err)
		}
	}
	if *sinceFile != "" {
		if opts.Since, err = readSince(ctx, *sinceFile, opts.Verifiers); err != nil {
			return err
		}
	}
	if len(paths) == 1 {
		return verifyOne(paths[0], opts, *sinceFile, stdout, stderr)
	}
	failed := 0
	for _, path := range paths {
		// A file that does not verify is named and the others are
		// still checked: each journal is its own evidence.
		if err := verifyOne(path, opts, "", stdout, stderr); err != nil {
			fmt.Fprintln(stderr, escapeControls(err.Error()))
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d journals do not verify", failed, len(paths))
	}
	return nil
}

// readSince reads the checkpoint saved in file for --since.
func readSince(ctx context.Context, file string, verifiers note.Verifiers) (*journal.Checkpoint, error) {
	b, err := readText(ctx, file)
	if err != nil {
		return nil, fmt.Errorf("--since: %w", err)
	}
	// A note ends in one newline; what kept it may have added more
	// (jq -r, an editor), or made each \r\n (a copy through Windows). A
	// note holds no \r, so taking them out changes nothing signed.
	b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	b = append(bytes.TrimRight(b, "\r\n"), '\n')
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("--since: %s is empty: give the note audit checkpoint printed, or a checkpoint line of the journal", file)
	}
	if bytes.HasPrefix(b, []byte("{")) {
		// A journal line, as a log shipper keeps it: its checkpoint
		// member is the note.
		var line struct {
			Checkpoint *string `json:"checkpoint"`
		}
		if err := json.Unmarshal(b, &line); err != nil {
			// Not "no checkpoint member": several lines, each with one,
			// or a line cut short, are not one JSON value.
			return nil, fmt.Errorf("--since: %s: not one JSON line (%v): give one checkpoint line of the journal, or the note audit checkpoint printed", file, err)
		}
		if line.Checkpoint == nil {
			return nil, fmt.Errorf("--since: %s: JSON with no checkpoint member: give a checkpoint line of the journal, or the note audit checkpoint printed", file)
		}
		b = []byte(*line.Checkpoint)
	}
	if n := bytes.Count(b, []byte("\n\n")); n > 1 {
		// A note has one blank line, before its signatures: more are
		// notes appended one after another (audit checkpoint >> FILE),
		// which read as one would read as forged.
		return nil, fmt.Errorf("--since: %s holds %d notes, one after another: give one, as audit checkpoint printed it, in a file of its own", file, n)
	}
	c, err := journal.ParseCheckpoint(b, verifiers)
	if err != nil {
		return nil, fmt.Errorf("--since: %s: the saved checkpoint does not verify: %w", file, err)
	}
	return c, nil
}

// verifyOne checks the journal at path and says what it found; sinceFile
// names where opts.Since was saved.
func verifyOne(path string, opts journal.CheckOptions, sinceFile string, stdout, stderr io.Writer) error {
	rep, err := checkJournal(path, opts)
	if err != nil {
		return err
	}
	path = escapeControls(path) // from here on only printed
	fmt.Fprintf(stdout, "%s: %s\n", path, linesVerify(rep.Lines))
	if rep.Lines == 0 {
		// A proxy that took no call leaves it so, and so does a cut of
		// every line: nothing in the file tells the two apart.
		fmt.Fprintf(stderr, "%s: warning: empty: no line to verify; a journal cut to nothing looks the same (a checkpoint kept elsewhere tells: --since)\n", path)
		return nil
	}
	reportCheckpoints(stdout, stderr, path, rep, opts.Verifiers != nil)
	if s := opts.Since; s != nil {
		fmt.Fprintf(stdout, "%s: line %d is the line the checkpoint saved in %s signs: the journal extends it\n", path, s.Size, escapeControls(sinceFile))
	}
	return nil
}

// checkJournal runs journal.Check on the file at path.
func checkJournal(path string, opts journal.CheckOptions) (*journal.Report, error) {
	f, err := journal.OpenRead(path)
	if err != nil {
		return nil, fmt.Errorf("verifying journal: %w", err)
	}
	defer f.Close()
	return checkFile(f, path, opts)
}

// checkFile runs journal.Check on f, the file at path.
func checkFile(f io.Reader, path string, opts journal.CheckOptions) (*journal.Report, error) {
	rep, err := journal.Check(f, opts)
	if le, ok := errors.AsType[*journal.LineError](err); ok {
		// FILE:LINE: as compilers write it, so an editor jumps there.
		return nil, fmt.Errorf("%s:%d: does not verify: %s (%s before it)", path, le.Line, le.Reason, linesVerify(rep.Lines))
	}
	if err != nil {
		return nil, fmt.Errorf("verifying journal %s: %w", path, err)
	}
	return rep, nil
}

// reportCheckpoints says what the checkpoints of a journal that verifies
// prove, and warns of the lines none covers when a key was given: the
// check passes, but not silently.
func reportCheckpoints(stdout, stderr io.Writer, path string, rep *journal.Report, keyed bool) {
	c := rep.Newest
	switch {
	case c == nil && !keyed:
		return // a journal kept without a key: the chain is all there is
	case c == nil:
		fmt.Fprintf(stderr, "%s: warning: no checkpoint: no signature covers its %s, which could have been rewritten unseen\n", path, count(rep.Lines, "line"))
		return
	case !keyed:
		fmt.Fprintf(stdout, "%s: %s, the newest at line %d; signatures not checked: give --key\n", path, count(rep.Checkpoints, "checkpoint"), c.Line)
		return
	}
	verb := "verify"
	if rep.Checkpoints == 1 {
		verb = "verifies"
	}
	fmt.Fprintf(stdout, "%s: %s %s; the newest, at line %d, signed by %s, covers %s\n", path, count(rep.Checkpoints, "checkpoint"), verb, c.Line, c.Signer, lineSpan(1, c.Size))
	if tail := rep.Lines - c.Line; tail > 0 {
		them, they := "them", "they"
		if tail == 1 {
			them, they = "it", "it"
		}
		fmt.Fprintf(stderr, "%s: warning: %s after the newest checkpoint (%s): no signature covers %s, and %s could have been cut or changed unseen\n",
			path, count(tail, "line"), lineSpan(c.Line+1, rep.Lines), them, they)
	}
}

// auditCheckpoint prints the newest checkpoint of a journal whose chain
// holds. A proxy may be appending: a torn last line is one being written,
// and is left out.
func auditCheckpoint(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("audit checkpoint", flag.ContinueOnError)
	path, err := parseAudit(fs, args, "FILE")
	if err != nil {
		return err
	}
	if path == "" {
		return errEmptyFile("audit checkpoint")
	}
	rep, err := checkJournal(path, journal.CheckOptions{StopAtTorn: true})
	if err != nil {
		return err
	}
	switch {
	case rep.Newest == nil && rep.Torn:
		// A checkpoint is often the last line, written at a stop: the
		// torn line may be the one asked for, cut short by a crash.
		return fmt.Errorf("%s: no checkpoint in its %s; its torn last line (line %d) was left out: a proxy is writing it (try again), or a crash cut it short (audit verify %s names it)",
			path, count(rep.Lines, "line"), rep.Lines+1, path)
	case rep.Newest == nil:
		return fmt.Errorf("%s: no checkpoint in its %s: the proxy writes them when given --journal-key", path, count(rep.Lines, "line"))
	}
	// A write that fails is runOutput's to judge: a full disk fails the
	// command, a reader that went away does not.
	stdout.Write(rep.Newest.Note)
	return nil
}

// auditKeygen makes a checkpoint key pair: the signer key into a new
// file, the verifier key to stdout.
func auditKeygen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("audit keygen", flag.ContinueOnError)
	out := fs.String("out", "", "")
	name, err := parseAudit(fs, args, "NAME")
	if err != nil {
		return err
	}
	if !keyNameOK(name) {
		return usagef("audit keygen: NAME %q: a key name is not empty and has no space, no control character and no +, as proxy1.example.com", name)
	}
	if *out == "" {
		if strings.ContainsAny(name, `/\`) {
			return usagef("audit keygen: NAME %q has a /, so it makes no file name: give --out FILE", name)
		}
		*out = name + ".key"
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return fmt.Errorf("generating a key: %w", err)
	}
	if err := writeNewFile(*out, []byte(skey+"\n")); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(stdout, vkey); err != nil {
		// The verifier key is printed nowhere else: a signer key kept
		// without it signs what nothing at hand checks, and keeps
		// keygen from making the pair again.
		os.Remove(*out)
		return fmt.Errorf("printing the verifier key: %w; %s was removed: run keygen again", err, *out)
	}
	fmt.Fprintf(stderr, "wrote the signer key to %s (mode 0600): give it to the proxy as --journal-key %s, and to no one else.\n"+
		"The verifier key (on stdout) checks its checkpoints: keep it where the journal's host cannot change it, and give it to audit verify --key.\n",
		escapeControls(*out), escapeControls(*out))
	return nil
}

// writeNewFile writes data to a file that must not exist yet, mode 0600.
func writeNewFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: keygen never overwrites a key; move it away, or give another --out", path)
	}
	if err != nil {
		return fmt.Errorf("writing the signer key: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path) // a key cut short signs nothing
		return fmt.Errorf("writing the signer key %s: %w", path, err)
	}
	return nil
}

// readVerifiers reads a file of verifier keys, one per line.
func readVerifiers(ctx context.Context, path string) (note.Verifiers, error) {
	b, err := readText(ctx, path)
	if err != nil {
		return nil, err
	}
	var vs []note.Verifier
	seen := make(map[string]bool)
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case seen[line]:
			// A key given twice would make every signature by it
			// "ambiguous" to the note package: one is enough.
			continue
		case line == "", strings.HasPrefix(line, "#"):
			continue // a key file kept by hand says whose each key is
		case strings.HasPrefix(line, "PRIVATE+KEY+"):
			return nil, fmt.Errorf("%s:%d: a signer key: give the verifier key that audit keygen printed, and keep the signer key secret", path, i+1)
		}
		v, err := note.NewVerifier(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: not a verifier key (NAME+HASH+KEY, as audit keygen prints it): %v", path, i+1, err)
		}
		vs = append(vs, v)
		seen[line] = true
	}
	if len(vs) == 0 {
		return nil, fmt.Errorf("%s: no verifier key in it", path)
	}
	return note.VerifierList(vs...), nil
}

// readSigner reads a signer key file that audit keygen wrote. Its errors
// never show the key.
func readSigner(ctx context.Context, path string) (note.Signer, error) {
	b, err := readText(ctx, path)
	if err != nil {
		return nil, err
	}
	key := strings.TrimSpace(string(b))
	if !strings.HasPrefix(key, "PRIVATE+KEY+") {
		if _, err := note.NewVerifier(key); err == nil {
			return nil, fmt.Errorf("%s: a verifier key; this takes the signer key, the file audit keygen wrote", path)
		}
		return nil, fmt.Errorf("%s: not a signer key (PRIVATE+KEY+..., as audit keygen writes it)", path)
	}
	s, err := note.NewSigner(key)
	if err != nil {
		return nil, fmt.Errorf("%s: a malformed signer key", path)
	}
	// note.NewSigner takes a name that note.Open refuses in a note's
	// text, which is every checkpoint's origin line: one with a
	// character below U+0020.
	if strings.ContainsFunc(s.Name(), func(r rune) bool { return r < ' ' }) {
		return nil, fmt.Errorf("%s: the key's name %q has a control character, so no checkpoint it signs could be verified: make a key with audit keygen", path, s.Name())
	}
	return s, nil
}

// keyNameOK reports whether name is one keygen makes a key of: not
// empty, UTF-8, and no space, control character or +. The name is also
// every checkpoint's origin line, and a note whose text holds a
// character below U+0020 fails to open; keygen refuses the other
// control characters too, which no terminal shows as they are.
func keyNameOK(name string) bool {
	bad := func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == '+' }
	return name != "" && utf8.ValidString(name) && !strings.ContainsFunc(name, bad)
}

// readableByOthers reports whether the file at path may be read by others
// than its owner, and its mode. A signer key should not be: audit keygen
// writes it 0600.
func readableByOthers(path string) (fs.FileMode, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	return fi.Mode(), fi.Mode().Perm()&0o044 != 0
}

// lineSpan names lines from to to: "line 4", "lines 4-9".
func lineSpan(from, to int) string {
	if from == to {
		return fmt.Sprintf("line %d", from)
	}
	return fmt.Sprintf("lines %d-%d", from, to)
}

func linesVerify(n int) string {
	if n == 1 {
		return "1 line verifies"
	}
	return fmt.Sprintf("%d lines verify", n)
}

// count says n things: "1 line", "3 lines".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
