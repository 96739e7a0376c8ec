package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// A ToolCall is the decoded params of a tools/call request.
type ToolCall struct {
	// Params is the params member as the caller sent it; it is what goes
	// upstream.
	Params json.RawMessage
	Name   string
	// Arguments is the arguments object, or nil when absent.
	Arguments json.RawMessage
	// Meta is the _meta member, or nil (absent or null), an object. It is
	// not part of the fingerprint: only what TasksExtension says of it is.
	Meta json.RawMessage
	// Key is the client's idempotency key from _meta, or "".
	Key string
	// TasksExtension reports whether the call's per-request client
	// capabilities (MCP 2026-07-28, in _meta) declare the tasks extension,
	// so that the server may answer it with a task handle rather than its
	// result: a call that does not is another action.
	TasksExtension bool
	// Stateless reports whether the call declares its protocol version in
	// _meta, as a request of the 2026-07-28 protocol does: it belongs to
	// no MCP session.
	Stateless bool
	// Elicits reports whether the call's per-request client capabilities
	// (MCP 2026-07-28, in _meta) declare elicitation in form mode, so
	// that the call may be answered with an input_required result that
	// asks the user.
	Elicits bool
	// Malformed reports, with an error of Parse's, that the error is a
	// member MCP does not allow as it is (arguments, task or _meta not an
	// object) in params otherwise read, Name among them: the call can
	// still go upstream as it came, unrecorded.
	Malformed bool
	// Deadline is the client's deadline from _meta (MetaDeadline), as a
	// time from the call's arrival, or 0 when it sets none.
	Deadline time.Duration
	// rare holds what few calls have (callRare), nil for the others: a
	// ToolCall is part of the one allocation of every call a proxy
	// handles, which this keeps within a smaller size class.
	rare *callRare
}

// callRare is the part of a ToolCall that most calls leave empty. It is
// not changed once parsed: copies of a ToolCall share it (SetTask).
type callRare struct {
	task, inputResponses, requestState json.RawMessage
	// metaAsSent is the _meta member's value when it is null.
	metaAsSent                          json.RawMessage
	keyErr, deadlineErr, executionIDErr *jsonrpc.Error
}

// rarePart returns tc's rare part, made if it has none; to be called
// only while tc is parsed.
func (tc *ToolCall) rarePart() *callRare {
	if tc.rare == nil {
		tc.rare = new(callRare)
	}
	return tc.rare
}

// HasRare reports whether the call may have any of the members few
// calls have: a task, a continuation, a null _meta, or a _meta key,
// deadline or execution id that cannot be read. Where it has not, their
// methods return nil, which a caller may skip asking on its hot path.
func (tc *ToolCall) HasRare() bool { return tc.rare != nil }

// MetaAsSent returns the _meta member's value as it came, null included,
// so that the proxy's own member replaces a null rather than shadowing
// it; nil when absent.
func (tc *ToolCall) MetaAsSent() json.RawMessage {
	if tc.Meta == nil && tc.rare != nil {
		return tc.rare.metaAsSent
	}
	return tc.Meta
}

// Task returns the task-augmentation member (MCP 2025-11-25 tasks), or
// nil.
func (tc *ToolCall) Task() json.RawMessage {
	if tc.rare == nil {
		return nil
	}
	return tc.rare.task
}

// SetTask sets the task-augmentation member Task returns, in tc alone:
// another copy of the call keeps its own.
func (tc *ToolCall) SetTask(task json.RawMessage) {
	var r callRare
	if tc.rare != nil {
		r = *tc.rare
	}
	r.task = task
	tc.rare = &r
}

// InputResponses and RequestState return the members that continue a
// multi-round request (MCP 2026-07-28); nil when absent.
func (tc *ToolCall) InputResponses() json.RawMessage {
	if tc.rare == nil {
		return nil
	}
	return tc.rare.inputResponses
}

// RequestState: see InputResponses.
func (tc *ToolCall) RequestState() json.RawMessage {
	if tc.rare == nil {
		return nil
	}
	return tc.rare.requestState
}

// KeyErr and DeadlineErr say why the client's key or deadline in _meta
// cannot be read (invalid params), or are nil. Parse leaves them to its
// caller, which knows the tool: a read-only tool's calls are never
// matched by key, and a call passed upstream as it came has no deadline
// of the proxy's to keep, so neither refuses it.
func (tc *ToolCall) KeyErr() *jsonrpc.Error {
	if tc.rare == nil {
		return nil
	}
	return tc.rare.keyErr
}

// DeadlineErr: see KeyErr.
func (tc *ToolCall) DeadlineErr() *jsonrpc.Error {
	if tc.rare == nil {
		return nil
	}
	return tc.rare.deadlineErr
}

// ExecutionIDErr refuses a call whose _meta holds a member that differs
// only in case from MetaExecutionID: the proxy's own member, which an
// upstream that matches names without regard to case (Go's
// encoding/json) would take for the execution id the proxy vouches for,
// or the proxy's for the client's. Left to the caller, as KeyErr: a call
// the proxy passes on as it came carries no id of its own, and the
// member goes as the client wrote it.
func (tc *ToolCall) ExecutionIDErr() *jsonrpc.Error {
	if tc.rare == nil {
		return nil
	}
	return tc.rare.executionIDErr
}

// MetaErr returns KeyErr, else DeadlineErr: what refuses a call that is
// recorded.
func (tc *ToolCall) MetaErr() *jsonrpc.Error {
	if err := tc.KeyErr(); err != nil {
		return err
	}
	return tc.DeadlineErr()
}

// ParseToolCall decodes and validates tools/call params, which must be
// valid JSON, as jsonrpc.Decode leaves a message's params: it checks what
// a tools/call needs of them, not the JSON again, a key and a deadline in
// _meta included (MetaErr). Its errors are JSON-RPC invalid-params errors,
// ready for the wire.
func ParseToolCall(params json.RawMessage) (*ToolCall, *jsonrpc.Error) {
	tc := new(ToolCall)
	if err := tc.Parse(params); err != nil {
		return nil, err
	}
	if err := tc.MetaErr(); err != nil {
		return nil, err
	}
	return tc, nil
}

// Parse is ParseToolCall into tc, for a caller that keeps the call in a
// struct of its own, but for the _meta key and deadline: it leaves their
// errors in tc (KeyErr, DeadlineErr). On an error tc is left part filled.
func (tc *ToolCall) Parse(params json.RawMessage) *jsonrpc.Error {
	var r ParamsReader
	if len(params) > 0 && params[0] == '{' && jsonrpc.EachMember(params, r.Member) != nil {
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call: params are not a valid object")
	}
	return tc.ParseRead(params, &r)
}

// A ParamsReader keeps the members of tools/call params that the proxy
// reads, as Member is handed each of them in turn (by jsonrpc.EachMember,
// or by jsonrpc.DecodeParamsInto as it validates the frame). The zero
// value is ready to use.
type ParamsReader struct {
	name, args, meta, task, inputResponses, requestState []byte
	// repeated is the first member met twice, or in another case;
	// metaRepeated, the first such _meta, which every request's reader
	// reads for its version (DeclaredVersion).
	repeated, metaRepeated []byte
}

// Meta returns the params' _meta as read, or nil.
func (r *ParamsReader) Meta() json.RawMessage { return r.meta }

// Member notes one member of the params. It always returns true.
func (r *ParamsReader) Member(name, value []byte) bool {
	// Members are read exactly as the upstream will read them; see
	// jsonrpc.EachMember. One that an upstream could read otherwise
	// (given twice, or in another case) refuses the call. A value is
	// never empty, so a member already set was met.
	var seen bool
	switch string(name) {
	case "name":
		seen, r.name = r.name != nil, value
	case "arguments":
		seen, r.args = r.args != nil, value
	case "_meta":
		seen, r.meta = r.meta != nil, value
	case "task":
		seen, r.task = r.task != nil, value
	case "inputResponses":
		seen, r.inputResponses = r.inputResponses != nil, value
	case "requestState":
		seen, r.requestState = r.requestState != nil, value
	default:
		seen = jsonrpc.FoldsTo(name, paramNames)
	}
	if seen && r.repeated == nil {
		r.repeated = name
	}
	if seen && r.metaRepeated == nil && bytes.EqualFold(name, []byte("_meta")) {
		r.metaRepeated = name
	}
	return true
}

// DeclaredVersion returns the protocol version the params' _meta
// declares, as a 2026-07-28 request does; "" when it declares none. A
// _meta, or a version in it, that an upstream could read otherwise is an
// error, as for the package's DeclaredVersion.
func (r *ParamsReader) DeclaredVersion() (string, error) {
	if r.metaRepeated != nil {
		return "", fmt.Errorf("params: %w", jsonrpc.Ambiguous(r.metaRepeated, []string{"_meta"}))
	}
	return metaVersion(r.meta)
}

// ParseRead is Parse for params whose members r was handed, each of
// them, in order: the params are not walked again.
func (tc *ToolCall) ParseRead(params json.RawMessage, r *ParamsReader) *jsonrpc.Error {
	if len(params) == 0 || params[0] != '{' {
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call: params must be an object with a \"name\"")
	}
	// Cleared in place: a literal would be built apart and copied over.
	*tc = ToolCall{}
	tc.Params = params
	nameRaw, args := r.name, r.args
	if r.repeated != nil {
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call: params: %v", jsonrpc.Ambiguous(r.repeated, paramNames))
	}
	tc.Arguments, tc.Meta = nullToNil(args), nullToNil(r.meta)
	task, inputResponses, requestState := nullToNil(r.task), nullToNil(r.inputResponses), nullToNil(r.requestState)
	if task != nil || inputResponses != nil || requestState != nil || tc.Meta == nil && r.meta != nil {
		rare := tc.rarePart()
		rare.task, rare.inputResponses, rare.requestState = task, inputResponses, requestState
		if tc.Meta == nil {
			rare.metaAsSent = r.meta // null
		}
	}
	// A plain name, the common case, is its own bytes: no second look
	// for escapes, nor one for UTF-8.
	name, plain := plainName(nameRaw)
	ok := plain
	if !plain {
		name, ok = jsonrpc.StringValue(nameRaw)
	}
	if !ok || name == "" {
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call: params.name must be a non-empty string")
	}
	if !plain && (!utf8.Valid(nameRaw) || strings.ContainsRune(name, utf8.RuneError)) {
		// Invalid UTF-8 and lone surrogates (\ud800) decode as U+FFFD,
		// so two such names would be one tool here, and two to a server
		// that keeps them apart. U+FFFD itself names no tool anyone made.
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call: params.name is not UTF-8 (or holds a lone surrogate or U+FFFD)")
	}
	tc.Name = name
	tc.Malformed = true // until the members' kinds are checked
	if args := tc.Arguments; args != nil && args[0] != '{' {
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: arguments must be an object, got %s", name, kind(args))
	}
	if task != nil && task[0] != '{' {
		// MCP's task is an object (TaskMetadata). The fingerprint keeps
		// only whether a call asks for a task, so two other values would
		// be one action here and two to the server.
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: params.task must be an object, got %s", name, kind(task))
	}
	if tc.Meta != nil && tc.Meta[0] != '{' {
		// MCP's _meta is an object; the proxy's own member could not be
		// added to anything else without dropping what the client sent.
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: params._meta must be an object, got %s", name, kind(tc.Meta))
	}
	tc.Malformed = false
	if tc.Meta != nil {
		m, err := readMeta(tc.Meta)
		if err != nil {
			return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: params._meta: %v", name, err)
		}
		key, err := clientKey(m)
		if err != nil {
			tc.rarePart().keyErr = jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: %v", name, err)
		}
		tc.Key = key
		if m.idVariant != nil {
			tc.rarePart().executionIDErr = jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: params._meta: %v", name, jsonrpc.Ambiguous(m.idVariant, []string{MetaExecutionID}))
		}
		if tc.Deadline, err = clientDeadline(m.deadline); err != nil {
			tc.rarePart().deadlineErr = jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: %v", name, err)
		}
		if tc.Elicits, err = declaresElicitation(tc.Meta); err != nil {
			return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: params._meta: %v", name, err)
		}
		tc.Stateless = m.version != nil
		return tc.readTasksExtension(name, m.caps)
	}
	return nil
}

// readTasksExtension sets TasksExtension from the call's _meta, whose
// client capabilities are caps, for the tools/call of tool name. The
// capabilities, the extensions in them and the tasks extension's
// settings are objects (null is taken for absent): the fingerprint keeps
// only whether a call declares the extension, and a server may read
// false or 1 at any of them either way, as params.task.
func (tc *ToolCall) readTasksExtension(name string, caps []byte) *jsonrpc.Error {
	what, value, err := capabilitiesNotObject(caps)
	if err == nil && what == "" {
		value, err = tasksDeclaration(tc.Meta)
		what = "the " + TasksExtension + " extension's settings"
	}
	if err != nil {
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: params._meta: %v", name, err)
	}
	if value != nil && value[0] != '{' {
		tc.Malformed = true
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: params._meta: %s must be an object, got %s", name, what, kind(value))
	}
	tc.TasksExtension = value != nil
	return nil
}

// capabilitiesNotObject returns which of caps, a call's client
// capabilities, and the extensions in them is neither an object nor
// null, and its value; "" where neither is. Extensions given twice, or in
// another case, are an error, as for tasksDeclaration.
func capabilitiesNotObject(caps []byte) (string, json.RawMessage, error) {
	if caps == nil || string(caps) == "null" {
		return "", nil, nil
	}
	if caps[0] != '{' {
		return MetaClientCapabilities, caps, nil
	}
	ext, err := jsonrpc.MemberOnce(caps, "extensions")
	if err != nil || ext == nil || string(ext) == "null" || ext[0] == '{' {
		return "", nil, err
	}
	return MetaClientCapabilities + ".extensions", ext, nil
}

// plainName returns the string raw, a valid JSON value, holds, if it is
// a string of ASCII without an escape: then it is UTF-8 and decodes to
// its own bytes, which hold no U+FFFD, and the checks for those need not
// run on every call. An escape, ASCII as it is, may spell a lone
// surrogate. Else it returns false.
func plainName(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c >= utf8.RuneSelf || c == '\\' {
			return "", false
		}
	}
	return string(inner), true
}

// paramNames are the members of tools/call params the proxy reads.
var paramNames = []string{"name", "arguments", "_meta", "task", "inputResponses", "requestState"}

// The members of a call's _meta the proxy reads, and their indexes there.
// The progress token is read elsewhere (the proxy's own progress to an
// attached caller, and the token of its own the call goes upstream
// with), but is checked here: an upstream that reads the other of two
// tokens sends its progress on the client's, which then reaches a caller
// that cancelled the call.
var metaNames = []string{MetaKey, MetaKeyCommon, MetaDeadline, MetaProtocolVersion, MetaClientCapabilities, MetaProgressToken}

const (
	metaKey = iota
	metaKeyCommon
	metaDeadline
	metaProtocolVersion
	metaClientCapabilities
)

// callMeta holds the raw values of the _meta members the proxy reads, nil
// when absent.
type callMeta struct {
	key, keyCommon, deadline, version, caps []byte
	// idVariant is the first member named as MetaExecutionID but in
	// another case (ToolCall.ExecutionIDErr), or nil.
	idVariant []byte
}

// readMeta reads the members of meta, an object, that the proxy acts on,
// refusing one an upstream could read otherwise.
func readMeta(meta json.RawMessage) (callMeta, error) {
	var m callMeta
	read := jsonrpc.Reading{Names: metaNames}
	jsonrpc.EachMember(meta, func(name, value []byte) bool {
		switch read.Note(name) {
		case metaKey:
			m.key = value
		case metaKeyCommon:
			m.keyCommon = value
		case metaDeadline:
			m.deadline = value
		case metaProtocolVersion:
			m.version = value
		case metaClientCapabilities:
			m.caps = value
		case -1:
			if m.idVariant == nil && string(name) != MetaExecutionID && bytes.EqualFold(name, []byte(MetaExecutionID)) {
				m.idVariant = name
			}
		}
		return true
	})
	return m, read.Err()
}

// tasksDeclaration returns the settings with which a call's _meta
// declares the tasks extension among its client capabilities, or nil
// where it does not (null is taken for absent). A member on the way given
// twice, or in another case, is an error: it changes the fingerprint, and
// an upstream reading the other one would answer another action.
func tasksDeclaration(meta json.RawMessage) (json.RawMessage, error) {
	if !bytes.Contains(meta, []byte("tasks")) && bytes.IndexByte(meta, '\\') < 0 {
		return nil, nil // the common case, without a walk; an escape may spell it otherwise
	}
	ext, err := path(meta, MetaClientCapabilities, "extensions", TasksExtension)
	if err != nil || string(ext) == "null" {
		return nil, err
	}
	return ext, nil
}

// declaresElicitation reports whether a call's _meta declares, among its
// client capabilities, elicitation in form mode: {} (form, as before
// modes) or a form member. Ambiguous members are errors, as for
// tasksDeclaration.
func declaresElicitation(meta json.RawMessage) (bool, error) {
	if !bytes.Contains(meta, []byte("elicitation")) && bytes.IndexByte(meta, '\\') < 0 {
		return false, nil // the common case, without a walk
	}
	e, err := path(meta, MetaClientCapabilities, "elicitation")
	if err != nil || len(e) == 0 || e[0] != '{' {
		return false, err
	}
	form, err := path(e, "form")
	if err != nil {
		return false, err
	}
	if form != nil {
		return form[0] == '{', nil
	}
	url, err := path(e, "url")
	return url == nil, err
}

// path returns the value at names, member within member, from obj, or
// nil where one is missing or not an object; a member given twice, or in
// another case, is an error (jsonrpc.Reading).
func path(obj json.RawMessage, names ...string) (json.RawMessage, error) {
	for _, name := range names {
		var err error
		if obj, err = jsonrpc.MemberOnce(obj, name); err != nil {
			return nil, err
		}
	}
	return obj, nil
}

// clientKey returns the client's idempotency key from _meta, or "" when it
// names none. The proxy's own member wins over the common spelling.
func clientKey(m callMeta) (string, error) {
	raw, from := m.key, MetaKey
	if raw == nil {
		raw, from = m.keyCommon, MetaKeyCommon
	}
	if raw == nil {
		return "", nil
	}
	key, ok := jsonrpc.StringValue(raw)
	switch {
	case !ok:
		return "", fmt.Errorf("_meta[%q] must be a string", from)
	case !utf8.Valid(raw) || strings.ContainsRune(key, utf8.RuneError):
		// Read as U+FFFD, "\ud800" and "\udbff" would be one key.
		return "", fmt.Errorf("_meta[%q] is not UTF-8, or holds a lone surrogate or U+FFFD", from)
	case key == "":
		return "", fmt.Errorf("_meta[%q] is empty", from)
	case len(key) > MaxKeyLength:
		return "", fmt.Errorf("_meta[%q] is %d bytes long; the limit is %d", from, len(key), MaxKeyLength)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 {
			return "", fmt.Errorf("_meta[%q] contains the control character %U", from, r)
		}
	}
	return key, nil
}

// clientDeadline returns the client's deadline from raw, the value of its
// _meta member, or 0 when it sets none. Anything but a positive whole
// number of milliseconds is an error: a call whose deadline cannot be
// read is refused, not run without one.
func clientDeadline(raw []byte) (time.Duration, error) {
	if raw == nil {
		return 0, nil
	}
	// The number's value counts, not its spelling: 1000, 1000.0 and 1e3
	// (a client computing in floating point writes 5000.0) are one value.
	const maxMS = math.MaxInt64 / int64(time.Millisecond)
	n, whole := wholeNumber(raw)
	switch {
	case whole && n.Sign() > 0 && (!n.IsInt64() || n.Int64() > maxMS):
		// Longer than any wait: it leaves the tool's deadline as it is
		// (a client's deadline only shortens it).
		return time.Duration(maxMS) * time.Millisecond, nil
	case !whole || n.Sign() <= 0:
		return 0, fmt.Errorf("_meta[%q] must be a positive whole number of milliseconds, not %s", MetaDeadline, truncate(raw))
	}
	return time.Duration(n.Int64()) * time.Millisecond, nil
}

// wholeNumber returns the value of the JSON value raw if it is a number
// whose value is whole, however spelled (100, 100.0, 1e2). An exponent
// past 30, or a number longer than 64 bytes, is not read: no deadline
// needs one, and big.Rat's time grows with the square of the digits.
func wholeNumber(raw []byte) (*big.Int, bool) {
	if len(raw) == 0 || len(raw) > 64 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return nil, false
	}
	if i := bytes.IndexAny(raw, "eE"); i >= 0 {
		e, err := strconv.Atoi(string(raw[i+1:]))
		if err != nil || e > 30 || e < -30 {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(string(raw))
	if !ok || !r.IsInt() {
		return nil, false
	}
	return r.Num(), true
}

// truncate returns raw JSON for an error message, cut to a readable size.
func truncate(raw []byte) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "..."
	}
	return string(raw)
}

func nullToNil(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

func kind(raw json.RawMessage) string {
	switch raw[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	default:
		return fmt.Sprintf("the number %s", raw)
	}
}
