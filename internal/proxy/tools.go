package proxy

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// A Resolver returns a tool's effective policy from its annotations (nil
// for a tool the upstream did not list).
type Resolver func(tool string, ann *mcp.Annotations) policy.Policy

// toolInfo is what the proxy knows of one tool.
type toolInfo struct {
	policy *policy.Policy // read-only: shared by every call of the tool
	// ann is the annotations the policy was resolved from: what every
	// listing of the tool since the last change agrees on (mcp.Strictest).
	ann *mcp.Annotations
	// schema holds the inputSchema's top-level property defaults, and
	// its properties declared beside one differing only in case where
	// the policy's defaults and ignore paths reach; nil when it has
	// neither.
	schema *intercept.Schema
	// listed says that a tools/list named the tool: metrics count the
	// calls of any other name under one label (metrics.UnlistedTool).
	listed bool
}

// toolTable is what the upstream's tools/list said, learned from the
// client's own listings as they pass and, for a tool not seen yet, from a
// listing the proxy asks for itself.
type toolTable struct {
	resolve Resolver
	log     *slog.Logger

	// learning is held by learnAt from its first read of tools to its
	// last write: pages merged at once would each miss the other's
	// annotations.
	learning sync.Mutex
	mu       sync.Mutex // guards tools, fetched, inFlight and gen
	tools    map[string]toolInfo
	fetched  bool          // a full listing was read since the last change
	inFlight chan struct{} // closed when the proxy's own listing finishes; nil if none
	// gen counts the changes the upstream announced. The proxy's own
	// listing is read on another goroutine than the announcements, so a
	// page read before one may be merged after it: pages carry the
	// generation their listing began in, and a stale one is dropped.
	gen uint64
	// warned is what the log said of tools whose policy has keys
	// without effect: the process's, shared by its sessions, or the
	// table's own (Options.ToolWarnings).
	warned *ToolWarnings
}

func newToolTable(resolve Resolver, log *slog.Logger, warned *ToolWarnings) *toolTable {
	if resolve == nil {
		resolve = func(_ string, ann *mcp.Annotations) policy.Policy { return policy.FromAnnotations(ann) }
	}
	if warned == nil {
		warned = NewToolWarnings()
	}
	return &toolTable{resolve: resolve, log: log, tools: make(map[string]toolInfo), warned: warned}
}

// learn merges one page of a tools/list result read now.
func (t *toolTable) learn(page mcp.ListPage) {
	t.learnAt(page, t.generation())
}

// generation returns the count of changes the upstream announced: a
// listing asked for now is learned from under it (learnAt).
func (t *toolTable) generation() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gen
}

// learnAt merges one page of a listing that began in generation gen,
// unless the upstream announced a change since, and warns of keys without
// effect on a tool it merges. It reports whether it merged the page.
func (t *toolTable) learnAt(page mcp.ListPage, gen uint64) bool {
	t.learning.Lock()
	defer t.learning.Unlock()
	t.mu.Lock()
	if gen != t.gen {
		t.mu.Unlock()
		return false
	}
	known := make(map[string]*mcp.Annotations, len(page.Tools))
	for _, tool := range page.Tools {
		if info, ok := t.tools[tool.Name]; ok {
			known[tool.Name] = info.ann
		}
	}
	t.mu.Unlock()
	infos := make(map[string]toolInfo, len(page.Tools))
	dropped := make(map[string][]string)
	for _, tool := range page.Tools {
		// A listed tool without annotations is distinct from one not
		// listed at all.
		ann := tool.Annotations
		if ann == nil {
			ann = &mcp.Annotations{}
		}
		// A tool listed twice since the last change (on one page, on two
		// pages, or in two listings) is taken at its strictest: a hint
		// one listing withholds must not let its calls pass unrecorded.
		ann = mcp.Strictest(known[tool.Name], ann)
		known[tool.Name] = ann
		pol := t.resolve(tool.Name, ann)
		defaults, left := fingerprintable(mcp.SchemaDefaults(tool.InputSchema))
		dropped[tool.Name] = left
		var twins *mcp.CaseTwins
		if pol.Defaults || len(pol.Ignore) > 0 {
			twins = mcp.SchemaCaseTwins(tool.InputSchema, pol.Ignore)
		}
		var schema *intercept.Schema
		if defaults != nil || twins != nil {
			schema = &intercept.Schema{Defaults: defaults, Twins: twins}
		}
		infos[tool.Name] = toolInfo{policy: &pol, ann: ann, schema: schema, listed: true}
	}
	var warn, warnDropped []string
	t.mu.Lock()
	if gen != t.gen {
		t.mu.Unlock()
		return false
	}
	for name, info := range infos {
		t.tools[name] = info
		if t.warned.note(name, info.policy) {
			warn = append(warn, name)
		}
		if t.warned.noteDropped(name, dropped[name]) {
			warnDropped = append(warnDropped, name)
		}
	}
	t.mu.Unlock()
	slices.Sort(warnDropped)
	for _, name := range warnDropped {
		t.log.Warn("the tool's inputSchema gives defaults the fingerprint cannot read (a name twice, a lone surrogate, a number past its bounds): "+
			"they are not filled in, and a call that leaves such a member out is fingerprinted without it",
			"tool", name, "members", strings.Join(dropped[name], ", "))
	}
	slices.Sort(warn)
	for _, name := range warn {
		p := infos[name].policy
		msg := "the policy file's rule for a read_only tool sets keys that need a record, so they have no effect: " +
			"its calls pass through unrecorded, and identical calls all run; set class: side_effect or idempotent in the rule to record them"
		if p.NoEffect.Class == policy.Idempotent {
			msg = "the policy file's rule for an idempotent tool sets replay, which has no effect: " +
				"only calls made while one runs share it, and a later identical call runs again; set class: side_effect in the rule to replay its calls"
		}
		t.log.Warn(msg, "tool", name, "policy", p.NoEffect.File, "rule", name, "keys", strings.Join(p.NoEffect.Keys, ", "), "class_from", p.Source)
	}
	return true
}

// invalidate forgets the listing after notifications/tools/list_changed.
func (t *toolTable) invalidate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tools = make(map[string]toolInfo)
	t.fetched = false
	t.gen++
}

// cached returns what is known of a tool without waiting: ok is false when
// the tool has not been seen and no full listing has been read.
func (t *toolTable) cached(name string) (toolInfo, bool) {
	t.mu.Lock()
	info, ok := t.tools[name]
	fetched := t.fetched
	t.mu.Unlock()
	if ok {
		return info, true
	}
	if fetched {
		return t.unlisted(name), true
	}
	return toolInfo{}, false
}

// unlisted is the info of a tool the upstream does not list: MCP's
// default, which is that it may have side effects, unless the policy file
// says otherwise.
func (t *toolTable) unlisted(name string) toolInfo {
	pol := t.resolve(name, nil)
	return toolInfo{policy: &pol}
}

// maxRelists bounds the listings one lookup makes when the upstream keeps
// announcing changes while it is listed; the tool is then taken for one
// the upstream does not list, unless an earlier listing named it.
const maxRelists = 3

// maxListPages bounds the pages of the proxy's own listing, so a server
// that always returns a cursor cannot keep it busy forever.
const maxListPages = 100

// listTimeout bounds the proxy's own listing, all its pages: a server that
// never answers tools/list must not hold the calls waiting on it for ever.
// They then go by what is known, as when the listing fails.
var listTimeout = 10 * time.Second

// lookup returns what is known of the named tool. A tool not seen yet makes
// the proxy list the upstream's tools once (concurrent callers share that
// listing); a tool still unknown after it is treated as unlisted. list
// performs one tools/list request.
func (t *toolTable) lookup(ctx context.Context, name string, list func(ctx context.Context, cursor string) (mcp.ListPage, error)) toolInfo {
	relists := 0
	for {
		if info, ok := t.cached(name); ok {
			return info
		}
		t.mu.Lock()
		if wait := t.inFlight; wait != nil {
			t.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return t.unlisted(name)
			}
		}
		done := make(chan struct{})
		t.inFlight = done
		gen := t.gen
		t.mu.Unlock()

		lctx, cancel := context.WithTimeout(ctx, listTimeout)
		ok := t.fetch(lctx, gen, list)
		cancel()

		t.mu.Lock()
		t.inFlight = nil
		changed := t.gen != gen
		t.fetched = t.fetched || ok && !changed
		info, known := t.tools[name]
		t.mu.Unlock()
		close(done)
		if ok && changed {
			// The upstream announced a change while it was listed: what
			// was read may be stale, so list again, not for ever.
			if relists++; relists < maxRelists {
				continue
			}
			ok = false
		}
		if !ok {
			// Listing failed: this call goes by what is known, and the
			// next one tries the listing again.
			if known {
				return info
			}
			return t.unlisted(name)
		}
	}
}

func (t *toolTable) fetch(ctx context.Context, gen uint64, list func(ctx context.Context, cursor string) (mcp.ListPage, error)) bool {
	cursor := ""
	for range maxListPages {
		page, err := list(ctx, cursor)
		if err != nil {
			return false
		}
		if !t.learnAt(page, gen) {
			return true // stale: lookup lists again
		}
		if page.NextCursor == "" {
			return true
		}
		cursor = page.NextCursor
	}
	return true
}

// protocolMeta returns the _meta members a stateless (2026-07-28) request
// must carry, copied from a request of the client's, or nil when that
// request carries none: the proxy's own requests speak the client's
// protocol.
func protocolMeta(meta json.RawMessage) map[string]json.RawMessage {
	if meta == nil {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(meta, &m) != nil {
		return nil
	}
	var out map[string]json.RawMessage
	for k, v := range m {
		// The protocol's own members (version, client info and
		// capabilities, and any a later revision adds), but not those that
		// belong to the request they came on, such as the task it relates
		// to (2025-11-25).
		if strings.HasPrefix(k, mcp.MetaProtocol) && k != mcp.MetaRelatedTask {
			if out == nil {
				out = make(map[string]json.RawMessage)
			}
			out[k] = v
		}
	}
	return out
}

// fingerprintable returns defaults without those the fingerprint refuses
// (one name twice, a lone surrogate, a number past its bounds), and the
// sorted names of those: filled in, such a default would have every call
// that omits its member refused for arguments the caller never sent. A
// call that spells the value itself is still refused.
func fingerprintable(defaults map[string]json.RawMessage) (_ map[string]json.RawMessage, dropped []string) {
	for name, v := range defaults {
		if fingerprint.CheckValue(v) != nil {
			delete(defaults, name)
			dropped = append(dropped, name)
		}
	}
	slices.Sort(dropped)
	if len(defaults) == 0 {
		return nil, dropped
	}
	return defaults, dropped
}
