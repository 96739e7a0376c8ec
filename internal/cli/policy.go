package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/proxy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
)

const policyUsage = `Usage:
  mcp-idempotent policy check FILE                    validate a policy file
  mcp-idempotent policy show [--policy FILE] [--scope S] -- COMMAND [ARGS...]
                                                      the effective policy of every tool the upstream lists
`

func runPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("policy: say check or show")
	}
	switch args[0] {
	case "check":
		if len(args) != 2 {
			return usagef("policy check takes one FILE")
		}
		if args[1] == "" {
			return errEmptyFile("policy check")
		}
		f, err := policy.Load(ctx, args[1])
		if err != nil {
			return err
		}
		n := len(f.Rules())
		fmt.Fprintf(stdout, "%s: valid, %d tool rule%s\n", args[1], n, plural(n))
		for _, r := range f.Rules() {
			// Without the upstream's annotations, only a rule's own
			// class is known: policy show sees the rest.
			if p := f.Resolve(r, nil); p.Explicit && p.NoEffect != nil {
				io.WriteString(stdout, noEffectNote(r, &p))
			}
		}
		return nil
	case "show":
		return runPolicyShow(ctx, args[1:], stdout, stderr)
	}
	return usagef("policy: unknown subcommand %q", args[0])
}

// newPolicyShowFlags returns the flags of policy show, and where they
// put the policy file and the scope.
func newPolicyShowFlags() (fs *flag.FlagSet, path, scope *string) {
	fs = flag.NewFlagSet("policy show", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path = fs.String("policy", "", "the policy `FILE` to merge with the annotations")
	scope = fs.String("scope", "", "the default intent scope, as for the proxy")
	return fs, path, scope
}

func runPolicyShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, path, scope := newPolicyShowFlags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("policy show: no upstream command: put it after --")
	}
	if emptyCommand(fs.Args()) {
		return errEmptyCommand()
	}
	// As the proxy warns: `policy show node srv.js --policy p.yaml` gives
	// the file to the server, and shows every tool without it.
	for _, name := range misplacedFlags(fs, args, fs.Args()) {
		fmt.Fprintf(stderr, "mcp-idempotent: warning: %s after the upstream command goes to the upstream, not to policy show: "+
			"put it before the command (a -- before the command says it is the upstream's)\n", name)
	}
	resolve, file, err := newResolver(ctx, *path, *scope)
	if err != nil {
		return err
	}
	tools, err := listUpstreamTools(ctx, fs.Args(), stderr)
	if err != nil {
		return err
	}

	listed := make(map[string]bool, len(tools))
	for _, t := range tools {
		listed[t.Name] = true
	}
	unwritten, notes := showTools(stdout, tools, resolve, listed)
	if unwritten > 0 {
		// Not "annotation defaults only": the file's defaults apply to
		// them too, but no rule says what a lost answer means for them.
		verb, whose := "have", "their"
		if unwritten == 1 {
			verb, whose = "has", "its"
		}
		fmt.Fprintf(stdout, "\n%d tool%s with effects %s no rule of %s own: nobody wrote down what happens\n"+
			"when a caller loses the answer after dispatch. Give each a rule in the policy file.\n", unwritten, plural(unwritten), verb, whose)
	}
	for _, note := range notes {
		io.WriteString(stdout, note)
	}
	notUsed(stdout, file, tools, listed)
	return nil
}

// showTools prints policy show's table: a row for each of tools, its
// policy as resolve gives it. It returns how many tools with effects no
// rule of the file covers, and the notes to print after the table:
// on status tools the upstream does not list (listed), and on keys
// without effect.
func showTools(w io.Writer, tools []mcp.Tool, resolve proxy.Resolver, listed map[string]bool) (unwritten int, notes []string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tCLASS\tSCOPE\tRETENTION\tREPLAY\tATTACH\tON_UNKNOWN\tAPPROVAL\tFROM\tCONTRACT")
	for _, t := range tools {
		ann := t.Annotations
		if ann == nil {
			ann = &mcp.Annotations{}
		}
		p := resolve(t.Name, ann)
		contract := "written"
		switch {
		case p.Class == policy.ReadOnly:
			contract = "-"
		case !p.Written:
			contract = "NOT WRITTEN"
			unwritten++
		}
		onUnknown := string(p.OnUnknown)
		if p.Recover != nil {
			onUnknown += " (" + printable(p.Recover.Tool) + ")"
			if !listed[p.Recover.Tool] {
				// Its status call would fail, and an unknown outcome
				// stay unknown.
				notes = append(notes, fmt.Sprintf("note: the status tool of %q, %q, is not one the upstream lists: "+
					"on_unknown: recover cannot settle it\n", t.Name, p.Recover.Tool))
			}
		}
		if p.NoEffect != nil {
			notes = append(notes, noEffectNote(t.Name, &p))
		}
		// Names come from the upstream and the file: a line break or a
		// tab in one would print a row of the table it made up.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(t.Name), p.Class, p.Scope, duration(p.Retention),
			p.Replay, duration(p.AttachWindow), onUnknown, approval(&p), printable(p.Source), contract)
	}
	tw.Flush()
	return unwritten, notes
}

// noEffectNote says that keys of the rule naming a read_only tool, or
// the replay of one naming an idempotent tool, have no effect, as the
// proxy's log does when the tool is listed.
func noEffectNote(tool string, p *policy.Policy) string {
	if p.NoEffect.Class == policy.Idempotent {
		return fmt.Sprintf("note: %s: the rule %q sets replay, which has no effect: the tool is idempotent, from the %s, so only calls made while one runs share it, "+
			"and a later identical call runs again: set class: side_effect in the rule to replay its calls\n",
			p.NoEffect.File, tool, printable(p.Source))
	}
	needs, effect := "need", "they have"
	if len(p.NoEffect.Keys) == 1 {
		needs, effect = "needs", "it has"
	}
	return fmt.Sprintf("note: %s: the rule %q sets %s, which %s a record; the tool is read_only, from the %s, so its calls pass through unrecorded "+
		"and %s no effect: set class: side_effect or idempotent in the rule to record them\n",
		p.NoEffect.File, tool, strings.Join(p.NoEffect.Keys, ", "), needs, printable(p.Source), effect)
}

// notUsed notes each rule of the file that governs none of the tools the
// upstream lists: a name it does not list, or a pattern that matches
// none, or only tools an exact name or an earlier pattern takes. Such a
// rule is most often a misspelling, and the tool it meant runs without it.
func notUsed(w io.Writer, file *policy.File, tools []mcp.Tool, listed map[string]bool) {
	if file == nil {
		return
	}
	used := make(map[string]bool, len(tools))
	for _, t := range tools {
		used[file.RuleOf(t.Name)] = true
	}
	for _, r := range file.Rules() {
		switch {
		case !strings.ContainsAny(r, `*?[\`):
			if !listed[r] {
				fmt.Fprintf(w, "note: %s names %q, which the upstream does not list\n", file.Path(), r)
			}
		case !used[r]:
			fmt.Fprintf(w, "note: %s: the pattern %q governs no tool the upstream lists: it matches none, "+
				"or an exact name or an earlier pattern takes each it matches\n", file.Path(), r)
		}
	}
}

// approval shows a policy's approval: none, or the mode, who is asked and
// for how long, as in "each by operator, 10m".
func approval(p *policy.Policy) string {
	if !p.NeedsApproval() {
		return "none"
	}
	return fmt.Sprintf("%s by %s, %s", p.Approval, p.Approver, duration(p.ApprovalTimeout))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// duration writes d as a policy file would: 7d, 72h, 10m, 90s.
func duration(d time.Duration) string {
	for _, u := range []struct {
		unit   time.Duration
		suffix string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d > 0 && d%u.unit == 0 {
			return fmt.Sprintf("%d%s", d/u.unit, u.suffix)
		}
	}
	return d.String()
}

// newResolver returns the policy of each tool: the policy file at path
// (none if empty) over the annotations, with scope as the default scope.
func newResolver(ctx context.Context, path, scope string) (proxy.Resolver, *policy.File, error) {
	var file *policy.File
	if path != "" {
		var err error
		if file, err = policy.Load(ctx, path); err != nil {
			return nil, nil, fmt.Errorf("--policy: %w", err)
		}
	}
	switch policy.Scope(scope) {
	case "", policy.ScopeSession, policy.ScopeActor, policy.ScopeKey:
	case policy.ScopeGlobal:
		return nil, nil, usagef("--scope global: a global scope shares executions across actors, so it is only allowed for a tool named exactly in the policy file")
	default:
		return nil, nil, usagef("--scope: %q is not one of session, actor, key", scope)
	}
	return func(tool string, ann *mcp.Annotations) policy.Policy {
		// The flag replaces the default; a scope the file gives wins.
		return file.ResolveScoped(tool, ann, policy.Scope(scope))
	}, file, nil
}

// listTimeout bounds how long policy show waits for the upstream to
// list its tools.
var listTimeout = 30 * time.Second

// listUpstreamTools starts the upstream, does the MCP handshake, lists
// every tool and stops it.
func listUpstreamTools(ctx context.Context, argv []string, stderr io.Writer) ([]mcp.Tool, error) {
	child, err := stdio.Start(argv, stderr, 0)
	if err != nil {
		return nil, err
	}
	defer stopChild(ctx, child)
	ctx, cancel := context.WithTimeoutCause(ctx, listTimeout, fmt.Errorf("none came within %v", listTimeout))
	defer cancel()
	c := newLister(child)
	if _, err := c.call(ctx, "initialize", map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    showCapabilities,
		"clientInfo":      map[string]string{"name": "mcp-idempotent policy show", "version": Version},
	}); err != nil {
		return nil, err
	}
	if err := child.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
		return nil, err
	}
	var tools []mcp.Tool
	cursor := ""
	for range 100 {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		result, err := c.call(ctx, "tools/list", params)
		if err != nil {
			return nil, err
		}
		page, err := mcp.ParseListResult(result)
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		tools = append(tools, page.Tools...)
		if cursor = page.NextCursor; cursor == "" {
			return onceEach(tools), nil
		}
	}
	return nil, errors.New("tools/list: more than 100 pages")
}

// onceEach returns tools with each name once, where it first came, its
// annotations those every listing of it agrees on (mcp.Strictest), as
// the proxy takes them: a second row would show a contract not enforced.
func onceEach(tools []mcp.Tool) []mcp.Tool {
	at := make(map[string]int, len(tools))
	out := tools[:0:0]
	for _, t := range tools {
		if t.Annotations == nil {
			t.Annotations = &mcp.Annotations{}
		}
		i, seen := at[t.Name]
		if !seen {
			at[t.Name] = len(out)
			out = append(out, t)
			continue
		}
		out[i].Annotations = mcp.Strictest(out[i].Annotations, t.Annotations)
	}
	return out
}

// showCapabilities is what policy show says its client can do: all a
// client may offer. A server may list a tool only to a client that can
// answer the requests it makes (sampling, elicitation, roots, tasks), and
// such a tool, a side effect as often as not, needs a contract as much as
// any. Listing asks the client nothing, and the lister refuses what the
// server asks anyway.
var showCapabilities = map[string]any{
	"roots":       map[string]any{"listChanged": true},
	"sampling":    map[string]any{},
	"elicitation": map[string]any{"form": map[string]any{}, "url": map[string]any{}},
	"tasks": map[string]any{"requests": map[string]any{
		"sampling":    map[string]any{"createMessage": map[string]any{}},
		"elicitation": map[string]any{"create": map[string]any{}},
	}},
}

// A lister is the least MCP client that lists an upstream's tools: one
// request at a time, the server's own requests refused.
type lister struct {
	child  *stdio.Child
	frames chan []byte // the child's frames, until it closes
	next   int         // the last request id used
}

func newLister(child *stdio.Child) *lister {
	l := &lister{child: child, frames: make(chan []byte, 16)}
	go func() {
		defer close(l.frames)
		for {
			f, err := child.ReadFrame()
			if err != nil {
				return
			}
			l.frames <- f
		}
	}()
	return l
}

// exitCause says how the child ended, its exit status and the end of its
// stderr, as the proxy's own errors do ("" if it cannot tell within
// exitCauseWait): a server that cannot start says why in its status too.
func (l *lister) exitCause(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, exitCauseWait)
	defer cancel()
	if cause := l.child.ExitCause(ctx); cause != "" {
		return ": it " + cause
	}
	return ""
}

// exitCauseWait bounds the wait for a child whose output closed to exit.
const exitCauseWait = 500 * time.Millisecond

// call sends a request and waits for its result.
func (l *lister) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	l.next++
	id := json.RawMessage(fmt.Sprint(l.next))
	p, _ := json.Marshal(params)
	if err := l.child.WriteFrame(jsonrpc.NewRequest(id, method, p)); err != nil {
		// An upstream that exited at start closes its stdin before our
		// first write as often as after: its exit says why, a broken
		// pipe does not.
		if cause := l.exitCause(ctx); cause != "" {
			return nil, fmt.Errorf("%s: the upstream closed before answering%s", method, cause)
		}
		return nil, fmt.Errorf("%s: writing to the upstream: %w", method, err)
	}
	for {
		select {
		case f, ok := <-l.frames:
			if !ok {
				return nil, fmt.Errorf("%s: the upstream closed before answering%s", method, l.exitCause(ctx))
			}
			m, err := jsonrpc.Decode(f)
			switch {
			case err != nil:
				continue
			case m.IsRequest():
				// A request of the server's during the listing
				// (roots, sampling): nobody is there to answer it.
				l.child.WriteFrame(jsonrpc.NewErrorResponse(m.ID, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "not supported by mcp-idempotent policy show")))
				continue
			case !m.IsResponse() || string(m.ID) != string(id):
				continue
			case m.Error != nil:
				return nil, fmt.Errorf("%s: %v", method, jsonrpc.DecodeError(m.Error))
			}
			return m.Result, nil
		case <-ctx.Done():
			// The cause: "context deadline exceeded" would not say how
			// long policy show waited.
			return nil, fmt.Errorf("%s: no answer from the upstream: %w", method, context.Cause(ctx))
		}
	}
}
