package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// takeOut removes from a batch, msgs read from frame, the messages that
// take handles, which it reports true for, and returns the rest and their
// frame; msgs and frame themselves when it takes none.
func takeOut(msgs []*jsonrpc.Message, frame []byte, take func(*jsonrpc.Message) bool) ([]*jsonrpc.Message, []byte) {
	var rest []*jsonrpc.Message
	taken := false
	for i, m := range msgs {
		switch {
		case take(m):
			if !taken {
				rest, taken = append(make([]*jsonrpc.Message, 0, len(msgs)), msgs[:i]...), true
			}
		case taken:
			rest = append(rest, m)
		}
	}
	if !taken {
		return msgs, frame
	}
	raws := make([][]byte, len(rest))
	for i, m := range rest {
		raws[i] = m.Raw
	}
	return rest, append(append([]byte("["), bytes.Join(raws, []byte(","))...), ']')
}

// notAnswer reports whether m is not an answer to a request.
func notAnswer(m *jsonrpc.Message) bool { return !m.IsResponse() }

// countOf counts the messages of msgs that f reports true for.
func countOf(msgs []*jsonrpc.Message, f func(*jsonrpc.Message) bool) int {
	n := 0
	for _, m := range msgs {
		if f(m) {
			n++
		}
	}
	return n
}

// fromClientBatch passes a batch through unless it holds a tools/call:
// splitting a batch would change what the client asked for, and passing
// the call through would skip deduplication, so such a batch is refused.
func (s *Session) fromClientBatch(frame []byte) {
	msgs, err := jsonrpc.DecodeBatch(frame)
	if err != nil {
		code := jsonrpc.CodeParseError
		if errors.Is(err, jsonrpc.ErrAmbiguous) || errors.Is(err, jsonrpc.ErrNotObjectInBatch) {
			// Valid JSON, but not messages: as for one message alone,
			// and as JSON-RPC 2.0 answers the batch [1].
			code = jsonrpc.CodeInvalidRequest
		}
		s.writeClient(jsonrpc.NewErrorResponse(nil, jsonrpc.Errorf(code, "mcp-idempotent: %v", err)))
		return
	}
	if len(msgs) == 0 {
		// JSON-RPC 2.0: an empty array is an invalid request, answered
		// with one error.
		s.writeClient(jsonrpc.NewErrorResponse(nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "mcp-idempotent: an empty batch is not a request")))
		return
	}
	if msgs, frame = s.askAnswers(msgs, frame); len(msgs) == 0 {
		return // answers to the proxy's asks only
	}
	// An answer no server could read is dropped, as one alone is; the
	// rest of the batch, the valid answers among it, goes on.
	if msgs, frame = takeOut(msgs, frame, s.badAnswer); len(msgs) == 0 {
		return
	}
	// A cancellation is the proxy's to act on, in a batch as alone: it
	// detaches a caller, and never reaches an execution (DESIGN 5). One
	// of a request of the batch is acted on once the batch is sent: sent
	// before it, it would name no request, and the request would run on.
	var after []*jsonrpc.Message
	defer func() {
		for _, m := range after {
			s.cancelled(m)
		}
	}()
	all := msgs
	if msgs, frame = takeOut(msgs, frame, func(m *jsonrpc.Message) bool {
		if !isCancel(m) {
			return false
		}
		if cancelsOneOf(m, all) {
			after = append(after, m)
		} else {
			s.cancelled(m)
		}
		return true
	}); len(msgs) == 0 {
		return
	}
	var calls []batchCall // in shadow mode, the batch's tools/calls
	for _, m := range msgs {
		why, call := s.batchRefusal(m)
		if why != "" {
			s.refuseRequests(msgs, frame, why)
			return
		}
		if call != nil {
			calls = append(calls, batchCall{call: *call, id: m.ID})
		}
	}
	s.sendBatch(msgs, frame, calls)
}

// batchRefusal returns why m, a message of a batch from the client,
// refuses the whole batch, or "" if it passes; and, in shadow mode, m
// read as a tools/call, if it is one that passes.
func (s *Session) batchRefusal(m *jsonrpc.Message) (why string, call *mcp.ToolCall) {
	var (
		version string
		verr    error
	)
	if m.Method != "" {
		why = jsonrpc.CheckRequest(m)
	}
	if m.IsRequest() {
		version, verr = declaredVersion(m)
	}
	var callWhy string
	if why == "" && m.Method == "tools/call" && s.shadowing() {
		// It passes, but for its id and token (below).
		var c mcp.ToolCall
		if c, callWhy = shadowBatchCall(m); callWhy == "" {
			call = &c
		}
	}
	switch {
	case why != "":
		why = "mcp-idempotent: " + why
	case callWhy != "":
		why = callWhy
	case m.Method == "tools/call" && !s.shadowing():
		why = "mcp-idempotent: tools/call cannot be sent in a batch; send each request on its own"
	case m.IsRequest() && s.reservedID(m.ID):
		why = s.reservedMessage()
	case m.IsRequest() && !jsonrpc.PortableID(m.ID):
		why = unportableID
	case m.IsRequest() && s.reservedToken(requestMeta(m.Params)):
		why = s.reservedTokenMessage()
	case verr != nil:
		why = fmt.Sprintf("mcp-idempotent: request %s in the batch (%s): %v", m.ID, m.Method, verr)
	case version != "" && !mcp.Negotiable(version):
		// As for a request alone (fromClient): the upstream might
		// know that version, and the proxy has not its rules.
		why = fmt.Sprintf("mcp-idempotent: a request in the batch declares protocol version %q in its _meta, which the proxy does not know: it speaks %s",
			version, strings.Join(mcp.Versions, ", "))
	default:
		return "", call
	}
	return why, nil
}

// shadowBatchCall reads m, a tools/call in a batch in shadow mode, as one
// alone is read: what normal mode refuses for its own judgement alone
// passes upstream, unrecorded; why, if not "", refuses the batch.
func shadowBatchCall(m *jsonrpc.Message) (call mcp.ToolCall, why string) {
	if perr := call.Parse(m.Params); perr != nil && !call.Malformed {
		return call, fmt.Sprintf("mcp-idempotent: request %s in the batch: %s", m.ID, perr.Message)
	}
	return call, ""
}

// refuseRequests refuses the requests of msgs, a batch of the client's in
// frame, for why. Its answers to the server's requests go on all the
// same: refused with it, they would leave the server waiting. Its
// notifications are dropped, and counted in the log.
func (s *Session) refuseRequests(msgs []*jsonrpc.Message, frame []byte, why string) {
	if answers, f := takeOut(msgs, frame, notAnswer); len(answers) > 0 {
		s.sendBatch(answers, f, nil) // no request in it: not refused again
	}
	if n := countOf(msgs, (*jsonrpc.Message).IsNotification); n > 0 {
		s.log.Warn("refused a batch from the client; its notifications were not sent", "why", why, "notifications_dropped", n)
	}
	s.refuseBatch(msgs, why)
}

// sendBatch sends msgs, a checked batch of the client's in frame,
// upstream. Its requests are remembered before it waits for a usable
// link, so that an upstream that exits meanwhile, or a restart that
// fails, answers them (abandon); a batch so answered is not sent. Its
// answers are checked against the link it goes on, as answerServer
// checks one. calls are its tools/calls in shadow mode, counted once it
// is taken (passedRefused), and traced, each ending its span with its
// answer.
func (s *Session) sendBatch(msgs []*jsonrpc.Message, frame []byte, calls []batchCall) {
	if s.opts.Tracer != nil {
		for i := range calls {
			calls[i].parent, calls[i].session = s.callParent(calls[i].call.Meta, string(jsonrpc.IDKey(calls[i].id)))
		}
	}
	s.mu.Lock()
	keys := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		if !m.IsRequest() {
			continue
		}
		key := string(jsonrpc.IDKey(m.ID))
		if keys[key] || s.inUseLocked(key, false) {
			s.mu.Unlock()
			s.refuseRequests(msgs, frame, fmt.Sprintf("mcp-idempotent: request id %s is already in use by a request still being answered, or twice in the batch; the batch's requests were not sent", m.ID))
			return
		}
		keys[key] = true
	}
	s.batches++
	batch := s.batches
	spans := s.startBatchSpansLocked(calls)
	for _, m := range msgs {
		if m.IsRequest() {
			key := string(jsonrpc.IDKey(m.ID))
			f := forwardedRequest{id: m.ID, method: m.Method, batch: batch, span: spans[key]}
			if m.Method == "tools/list" {
				f.toolsGen = s.tools.generation()
			}
			s.rememberLocked(key, f)
		}
	}
	s.mu.Unlock()
	for i := range calls {
		s.passedRefused(&calls[i].call)
	}
	l := s.lockUsable()
	if !s.sendingLocked(msgs, batch, l) {
		s.mu.Unlock()
		return // answered while it waited: the upstream it was for is gone
	}
	if msgs, frame = s.serverAnswersLocked(l, msgs, frame); len(msgs) == 0 {
		s.mu.Unlock()
		return
	}
	// As notifyUpstream notes one alone: a restarted upstream is given it.
	if slices.ContainsFunc(msgs, isInitialized) {
		s.initialized = true
	}
	s.mu.Unlock()
	id := strconv.FormatUint(batch, 10)
	if closed(l.gone) {
		s.batchNotSent(id, errors.New("the upstream is not running"))
	} else {
		sendForwarded(l, frame, id, s.batchNotSentFunc)
	}
}

// sendingLocked notes that the requests of batch number batch, msgs, go
// on the link l, and reports whether any is still to be sent: none is
// when abandon answered them all while the batch waited. One the client
// cancelled meanwhile is forgotten, and goes with the rest. A batch of no
// requests is sent. s.mu must be held.
func (s *Session) sendingLocked(msgs []*jsonrpc.Message, batch uint64, l *link) bool {
	requests, remembered := 0, 0
	for _, m := range msgs {
		if !m.IsRequest() {
			continue
		}
		requests++
		key := string(jsonrpc.IDKey(m.ID))
		if f, ok := s.forwarded[key]; ok && f.batch == batch {
			f.link = l
			s.forwarded[key] = f
			remembered++
		}
	}
	return requests == 0 || remembered > 0
}

// isInitialized reports whether m is notifications/initialized.
func isInitialized(m *jsonrpc.Message) bool {
	return m.IsNotification() && m.Method == "notifications/initialized"
}

// isCancel reports whether m is a valid notifications/cancelled.
func isCancel(m *jsonrpc.Message) bool {
	return m.Method == "notifications/cancelled" && m.ID == nil && jsonrpc.CheckRequest(m) == ""
}

// cancelsOneOf reports whether m, a cancellation, names a request of
// msgs.
func cancelsOneOf(m *jsonrpc.Message, msgs []*jsonrpc.Message) bool {
	id, err := jsonrpc.CancelledID(m.Params)
	if err != nil || id == nil {
		return false
	}
	key := string(jsonrpc.IDKey(id))
	for _, r := range msgs {
		if r.IsRequest() && string(jsonrpc.IDKey(r.ID)) == key {
			return true
		}
	}
	return false
}

// refuseBatch answers each request of msgs, a batch refused for why, in
// one array: under its id, or under a null id where the id is not valid,
// is held by a request still being answered (answerID) or is given twice
// in the batch, since an answer under it would be taken for another's.
// s.mu must not be held.
func (s *Session) refuseBatch(msgs []*jsonrpc.Message, why string) {
	given := make(map[string]int, len(msgs))
	for _, m := range msgs {
		if m.IsRequest() {
			given[string(jsonrpc.IDKey(m.ID))]++
			s.countRefused(m, jsonrpc.CodeInvalidRequest)
		}
	}
	var errs [][]byte
	for _, m := range msgs {
		if !m.IsRequest() {
			continue
		}
		id := s.answerID(m.ID)
		if given[string(jsonrpc.IDKey(m.ID))] > 1 {
			id = nil
		}
		errs = append(errs, jsonrpc.NewErrorResponse(id, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "%s", why)))
	}
	if len(errs) == 0 {
		// Notifications only: JSON-RPC answers none, so the log says why
		// they went nowhere.
		s.log.Warn("dropped a batch of notifications", "why", why)
		return
	}
	s.writeClient(append(append([]byte("["), bytes.Join(errs, []byte(","))...), ']'))
}

// requestMeta returns the _meta of a request's params, or nil.
func requestMeta(params json.RawMessage) json.RawMessage {
	meta, _ := jsonrpc.MemberOnce(params, "_meta")
	return meta
}

// passedRefused counts call, a tools/call of a batch that normal mode
// refuses and shadow mode passes upstream as it came, unrecorded: invalid
// is what it would have become. The batch goes at once, so the tool is
// labelled by what is known of it then.
func (s *Session) passedRefused(call *mcp.ToolCall) {
	info := s.knownTool(call.Name)
	s.opts.Interceptor.Refused(context.Background(), intercept.Tool{Name: call.Name, Listed: info.listed}, info.policy.Class, intercept.RouteUnreadable)
}
