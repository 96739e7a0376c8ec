package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// resolve settles an unknown execution as a says, prints it, and appends
// the transition to a.journal, if given, as the operator's.
func (a *activityArgs) resolve(ctx context.Context, store record.Store, stdout io.Writer) error {
	return a.operatorChange(ctx, stdout, "resolved", func() (*record.Record, error) {
		return resolveExecution(ctx, store, a.pos[0], a.as, a.note)
	})
}

// operatorChange makes an operator's change to an execution (change),
// prints the record it leaves, and appends its last transition to
// a.journal, if given, as the operator's; done says what the change does,
// for errors.
//
// The journal is opened first. A journal that a proxy holds, or whose
// tail is broken, refuses the command before anything is changed: a
// change is never made that its journal cannot take. A line that cannot
// be written after the store took the change (a full disk) is an error,
// said after the record is printed, so it is not lost silently either.
func (a *activityArgs) operatorChange(ctx context.Context, stdout io.Writer, done string, change func() (*record.Record, error)) error {
	var jw *journal.Writer
	made := false // the journal file is made for this change
	if a.journal != "" {
		_, statErr := os.Stat(a.journal)
		made = errors.Is(statErr, fs.ErrNotExist)
		var err error
		if jw, err = openOperatorJournal(ctx, a.journal, a.journalKey, done); err != nil {
			return err
		}
		defer jw.Close()
	}
	r, err := change()
	if errors.Is(err, record.ErrNotFound) {
		// A mistyped id, or the store of another proxy: a Redis
		// prefix is not checked, so say which store was read.
		err = fmt.Errorf("%w in --store %s", err, storeShown(a.store))
	}
	if err != nil && jw != nil {
		// Refused: the journal is left as it was, with no checkpoint
		// signed for a change that did not happen, and no empty file.
		jw.Abandon()
		if made {
			os.Remove(a.journal)
		}
	}
	if err != nil {
		return err
	}
	// Printed first, but journaled whether or not it printed: the
	// store took the change, and its line must not be lost with the
	// output (stdout on a full disk).
	out := &outputWriter{w: stdout} // the text's writes go unchecked
	printErr := a.print(out, r)
	if printErr == nil {
		printErr = out.err
	}
	if jw != nil {
		err = jw.Record(operatorEntry(r))
		if err == nil {
			err = jw.Close()
		}
		if err != nil {
			return fmt.Errorf("execution %s was %s (%s), but its journal line may not have been written: %w", r.ID, done, r.State, err)
		}
	}
	// A reader that stopped reading (| head) is no error, as for any
	// output (runOutput): the change was made, and journaled.
	if printErr != nil && !errors.Is(printErr, syscall.EPIPE) {
		return fmt.Errorf("execution %s was %s (%s), but printing it failed: %w", r.ID, done, r.State, printErr)
	}
	return nil
}

// openOperatorJournal opens the journal at file for an operator's
// command, naming the operator as the writer of its lines, and signing
// them with a checkpoint at its close if key names a signer key; done
// says what the command does, for the error that it did nothing.
func openOperatorJournal(ctx context.Context, file, key, done string) (*journal.Writer, error) {
	// Lazy: a command refused after a long wait for the store leaves no
	// checkpoint either (Abandon).
	opts := journal.Options{Writer: journal.Process{Operator: osUser()}, Lazy: true}
	if key != "" {
		s, err := readSigner(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("--journal-key: %w; nothing was %s", err, done)
		}
		opts.Signer = s
	}
	jw, err := journal.OpenWith(file, opts)
	if errors.Is(err, journal.ErrLocked) {
		// A journal has one writer at a time (journal.Open).
		return nil, fmt.Errorf("--journal %s: %w, such as a proxy; nothing was %s: give this command a journal file of its own, or stop the proxy first", file, journal.ErrLocked, done)
	}
	if err != nil {
		return nil, fmt.Errorf("--journal: %w; nothing was %s", err, done)
	}
	return jw, nil
}

// operatorEntry is the journal line of an operator's change to r, its
// last transition: a resolution, or a decision with who made it.
func operatorEntry(r *record.Record) journal.Entry {
	last := r.History[len(r.History)-1]
	return journal.Entry{
		Time: last.At, Execution: r.ID, Tool: r.Tool, State: string(r.State), Attempt: r.Attempts,
		Upstream: r.Upstream, Actor: r.Actor, Scope: r.Scope, Fingerprint: r.Fingerprint, Note: last.Note,
		By: last.By, Via: last.Via,
	}
}

// resolveExecution settles an unknown execution as an operator found it,
// recording who did and why.
func resolveExecution(ctx context.Context, store record.Store, id, as, note string) (*record.Record, error) {
	cur, err := store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if cur.State != record.Unknown {
		return nil, fmt.Errorf("execution %s is %s; only an unknown execution is resolved by hand", id, cur.State)
	}
	if expired(cur, time.Now()) {
		// Settling it would give it a new retention: an execution no
		// call matches would replay again, or not, as purges fell.
		return nil, fmt.Errorf("execution %s expired at %s: no call matches it, and an identical call runs as a new execution; nothing was resolved", id, cur.ExpiresAt.Format(time.RFC3339))
	}
	why := "resolved by " + osUser()
	if note != "" {
		why += ": " + note
	}
	// Only from unknown: a proxy may re-dispatch it meanwhile, and that
	// execution's outcome is then the proxy's to record.
	// By and Via mark the transition as an operator's word, not an
	// answer the upstream gave: activity show tells them apart.
	c := record.Change{From: record.Unknown, Note: why, By: osUser(), Via: record.ApproverOperator}
	switch record.State(as) {
	case record.Failed:
		c.To = record.Failed
	case record.Completed:
		// Retries of a completed execution replay its result: this one
		// says what the operator found.
		text := fmt.Sprintf("Completed: execution %s of %s was resolved as done by an operator (%s).", id, cur.Tool, why)
		result, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}}) // strings always marshal
		c.To, c.Result = record.Completed, result
	default:
		return nil, usagef("--as: %q is not failed or completed", as)
	}
	r, err := store.Update(ctx, id, c)
	if errors.Is(err, record.ErrConflict) {
		// The store's message names the change refused ("from failed
		// to completed"), which reads as a move the execution made:
		// say what it is now, and who made it so.
		if now, gerr := store.Get(ctx, id); gerr == nil && now.State != record.Unknown {
			return nil, fmt.Errorf("execution %s was settled meanwhile: it is %s%s; only an unknown execution is resolved by hand", id, now.State, lastBy(now))
		}
		return nil, fmt.Errorf("execution %s changed while it was being resolved: %w", id, err)
	}
	return r, err
}

// lastBy says who made r's last transition, and why, when its history
// names them: " (by bob through operator: ...)".
func lastBy(r *record.Record) string {
	if len(r.History) == 0 {
		return ""
	}
	if h := r.History[len(r.History)-1]; h.By != "" || h.Via != "" {
		return " (" + byWhom(h) + ")"
	}
	return ""
}

// byWhom says who made h, through which channel, and why.
func byWhom(h record.Transition) string {
	return strings.TrimSuffix(fmt.Sprintf("by %s through %s: %s", orNone(h.By), h.Via, h.Note), ": ")
}
