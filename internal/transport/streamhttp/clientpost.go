package streamhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// post sends one POST and relays what comes back.
func (c *Client) post(req *http.Request, s sent) {
	defer c.wg.Done()
	defer func() { // last: after its requests are answered
		c.mu.Lock()
		c.posts--
		last := c.gone && c.posts == 0
		c.mu.Unlock()
		if last {
			c.expire()
		}
	}()
	if s.call != nil {
		defer c.forget(s)
	}
	if s.after != nil {
		select {
		case <-s.after:
		case <-c.ctx.Done(): // Do fails at once
		}
	}
	if s.sessionWait != nil {
		select {
		case <-s.sessionWait:
		case <-c.ctx.Done():
		}
		c.mu.Lock()
		if c.sessionID != "" {
			req.Header.Set(headerSessionID, c.sessionID)
			s.hasSID = true
		}
		c.mu.Unlock()
	}
	var connected atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	}))
	resp, err := c.do(req)
	if s.taken != nil {
		close(s.taken)
	}
	if err == nil && s.isInit && resp.StatusCode/100 == 2 {
		if sid := resp.Header.Get(headerSessionID); sid != "" {
			c.mu.Lock()
			c.sessionID = sid
			c.mu.Unlock()
		}
	}
	if s.headers != nil {
		close(s.headers)
	}
	if err != nil {
		c.log.Warn("POST to the upstream failed", "err", err)
		c.fail(s, s.ids, jsonrpc.NoAnswer{
			NotSent: c.notSent(err, connected.Load()),
			Reason:  "upstream unreachable: " + err.Error(),
		})
		return
	}
	defer resp.Body.Close()
	// Keyed by IDKey: a server that decodes an id and encodes it again
	// answers 2.0 as 2, "<p>" as "\u003cp\u003e" (the go-sdk does).
	pending := make(map[string]json.RawMessage, len(s.ids))
	for _, id := range s.ids {
		pending[string(jsonrpc.IDKey(id))] = id
	}
	switch {
	case resp.StatusCode/100 != 2:
		c.refused(resp, s, pending)
	case resp.StatusCode == http.StatusAccepted || len(s.ids) == 0:
		// 202 is the answer to notifications and responses; a body, if
		// any, carries nothing we need.
		if len(s.ids) > 0 {
			// Accepted for processing: it may run, unseen.
			c.fail(s, s.ids, noAnswer(resp, "upstream accepted the request without answering it (HTTP 202)"))
		}
	default:
		c.relayBody(resp, s, pending)
	}
}

// notSent reports whether err, a POST's failure, says that no byte of
// the POST left: with a transport that reports the connection it gets
// (net/http's does, once dialled and past the TLS handshake), any
// failure before it got one, gotConn false; a bad certificate fails the
// handshake, before the request could be written. A dial that failed
// says so too, but after a connection was reported only from net/http:
// it sends a POST again on a new connection only where nothing of it was
// written, or the server said it did not process it (the POST is not
// replayable: see wireKey), while another transport may have retried one
// the server read. Any other failure may have come after the upstream
// read the request.
func (c *Client) notSent(err error, gotConn bool) bool {
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return c.tracesConns || !gotConn
	}
	return c.tracesConns && !gotConn
}

// refused answers the requests in pending of a POST the server answered
// with an error status, resp.
func (c *Client) refused(resp *http.Response, s sent, pending map[string]json.RawMessage) {
	if s.stateless {
		c.relayErrorBody(resp, pending)
	}
	msg := "upstream answered HTTP " + strconv.Itoa(resp.StatusCode)
	if loc, err := resp.Location(); err == nil && resp.StatusCode/100 == 3 {
		// Only a redirect that sameOriginRedirect would not follow
		// comes here.
		msg += ", a redirect to " + ShownURL(loc) + " that is not followed (another scheme, host or port, or another method): give --upstream the URL to use"
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && s.hasSID:
		// Spec, "Session Management": a 404 to a request with a session
		// id means the session is gone.
		msg = "upstream session expired (HTTP 404)"
		c.endSession()
	case resp.StatusCode == http.StatusBadRequest && s.hasSID && c.sessionForgotten():
		msg += ", and the upstream session expired: a ping in it was refused too"
		c.endSession()
	}
	c.log.Warn("upstream refused a POST", "status", resp.StatusCode)
	c.fail(s, unansweredIDs(s.ids, pending), noAnswer(resp, msg))
}

// sessionPing is the request with which sessionForgotten asks the
// server whether it knows the session. Its answer is read here, never
// returned by ReadFrame.
const sessionPing = `{"jsonrpc":"2.0","id":"` + sessionPingID + `","method":"ping"}`

// sessionPingID is the id of sessionPing.
const sessionPingID = "mcp-idempotent/session-check"

// sessionCheckTimeout bounds the wait for the answer to sessionPing; a
// server that has not answered by then is taken to know the session.
const sessionCheckTimeout = 10 * time.Second

// sessionForgotten reports whether the server refuses a ping in the
// session with 400 or 404, but for a 400 that answers the ping itself:
// it no longer knows the session. Servers built
// from the TypeScript SDK's examples answer 400, not the spec's 404, to
// a session id they do not know, as after a restart; a 400 alone may be
// the request's own fault, in a session still alive.
func (c *Client) sessionForgotten() bool {
	// Bounded: the 400 it explains waits for it.
	ctx, cancel := context.WithTimeout(c.ctx, sessionCheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(sessionPing))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	c.mu.Lock()
	c.setHeadersLocked(req, false)
	c.mu.Unlock()
	resp, err := c.do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound:
		return true
	case http.StatusBadRequest:
		// An answer under the ping's id, if an error, says the server
		// read the ping in the session: one that gives its JSON-RPC
		// errors that status, and takes no ping, knows the session.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		m, err := jsonrpc.Decode(body)
		if err != nil || !m.IsResponse() {
			return true
		}
		id, ok := jsonrpc.StringValue(m.ID)
		return !ok || id != sessionPingID
	}
	return false
}

// relayBody delivers the answers in the body of resp, a JSON object or an
// event stream, and answers the requests in pending that it left
// unanswered.
func (c *Client) relayBody(resp *http.Response, s sent, pending map[string]json.RawMessage) {
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	reason := "upstream response ended without an answer"
	came := false // the answer came, and was dropped over the limit
	switch ct {
	case "application/json":
		body, err := io.ReadAll(io.LimitReader(resp.Body, pastLimit(c.max)))
		switch {
		case err != nil:
			c.log.Warn("reading the upstream's answer", "err", err)
			reason = "reading the upstream's answer failed: " + err.Error()
		case len(body) > c.max:
			// As over stdio: the caller is told of the limit, which it
			// may raise, rather than of an answer that never came.
			reason, came = c.dropBody(resp, body, pending)
		default:
			c.deliver(body, pending)
			// Checked only for a body that answered nothing, as deliver
			// reads it: a gateway's page under the wrong Content-Type,
			// say. The caller is told what came, as over stdio.
			if len(pending) > 0 && !jsonrpc.Valid(body) {
				c.log.Error("an answer from the upstream is not JSON", "size", len(body))
				reason = "the upstream's answer is not JSON"
			}
		}
	case "text/event-stream":
		dropped, gone := c.relayStream(resp, pending, !s.stateless)
		if dropped {
			reason += ", after a " + tooLarge(c.max) + " was dropped from it"
		}
		if gone {
			reason += ", and the upstream session expired (HTTP 404) when it was resumed"
			c.endSession()
		}
	default:
		c.log.Warn("the upstream answered with an unexpected Content-Type", "content_type", ct)
		reason = fmt.Sprintf("the upstream answered with Content-Type %q, not JSON or an event stream", ct)
	}
	if len(pending) == 0 {
		return
	}
	ids, na := unansweredIDs(s.ids, pending), noAnswer(resp, reason)
	if came {
		// The server's answer, not the end of a POST that a
		// cancellation cut short: a request cancelled meanwhile is
		// told of it, as from an event stream (dropTooLarge).
		c.answer(ids, na)
		return
	}
	c.fail(s, ids, na)
}

// pastLimit is how much of a body is read to tell whether it is over
// max: a byte more, but for a max of math.MaxInt64, where the sum would
// wrap to a negative count, which reads nothing.
func pastLimit(max int) int64 {
	if int64(max) == math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(max) + 1
}

// tooLarge says that a message from the upstream was over the limit max,
// in the words the stdio transport uses.
func tooLarge(max int) string {
	return "message larger than the " + strconv.Itoa(max) + "-byte limit (--max-message-size)"
}

// relayErrorBody delivers the JSON-RPC error with which a stateless-era
// server explains an HTTP error, when it answers a request in pending. The
// client needs it as it came: an UnsupportedProtocolVersionError lists the
// versions to retry with, and a client probing with server/discover falls
// back to initialize only on an error it does not recognise as modern
// (spec 2026-07-28, basic/transports/streamable-http, "Protocol Version
// Header" and "Backward Compatibility").
func (c *Client) relayErrorBody(resp *http.Response, pending map[string]json.RawMessage) {
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "application/json" {
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, pastLimit(c.max)))
	if err != nil || len(body) > c.max {
		return
	}
	m, err := jsonrpc.Decode(bytes.TrimSpace(body))
	if err != nil || !m.IsResponse() || m.Error == nil {
		return
	}
	if _, ok := pending[string(jsonrpc.IDKey(m.ID))]; ok {
		c.deliver(body, pending)
	}
}

// fail answers ids with na, unless the client cancelled the request: it
// expects no answer then, and the server sends none (spec 2026-07-28,
// "Cancellation": the server "MUST NOT send any further messages for it").
func (c *Client) fail(s sent, ids []json.RawMessage, na jsonrpc.NoAnswer) {
	if s.call != nil {
		c.mu.Lock()
		cancelled := s.call.cancelled
		c.mu.Unlock()
		if cancelled {
			c.log.Debug("not answering a cancelled request", "reason", na.Reason)
			return
		}
	}
	c.answer(ids, na)
}

// forget removes a finished stateless request from c.calls.
func (c *Client) forget(s sent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id := string(jsonrpc.IDKey(s.ids[0])); c.calls[id] == s.call {
		delete(c.calls, id)
	}
	s.call.cancel()
}

// unansweredIDs returns the ids still in pending, in the order sent.
func unansweredIDs(ids []json.RawMessage, pending map[string]json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	for _, id := range ids {
		if _, ok := pending[string(jsonrpc.IDKey(id))]; ok {
			out = append(out, id)
		}
	}
	return out
}

// noAnswer is the account of a request that an HTTP answer resp, which
// carried no JSON-RPC answer to it, leaves unanswered: its status and
// Retry-After, for the retry classifier.
func noAnswer(resp *http.Response, reason string) jsonrpc.NoAnswer {
	return jsonrpc.NoAnswer{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After"), Reason: reason}
}

// answer hands ReadFrame, for each id, the Client's own account na of a
// request that got no answer.
func (c *Client) answer(ids []json.RawMessage, na jsonrpc.NoAnswer) {
	for _, id := range ids {
		e := na
		e.ID = id
		select {
		case <-c.done:
			return // closed: nothing more is delivered
		default:
		}
		select {
		case c.frames <- inbound{noAnswer: &e}:
		case <-c.done:
			return // closed: nothing more is delivered
		}
	}
}

// deliver hands frame to ReadFrame, noting the answers to pending and the
// initialize result. pending, when not nil, holds the requests of the POST
// whose answer frame came in: an answer in it to any other request (one
// already answered, or another POST's, which would then be taken for that
// request's) is dropped, as is a message that is neither a request nor an
// answer. It reports false once the Client is closed.
func (c *Client) deliver(frame []byte, pending map[string]json.RawMessage) bool {
	frame = bytes.TrimSpace(frame)
	if jsonrpc.HasLineBreak(frame) {
		// Frames are newline-free: the stdio side writes one per line.
		var b bytes.Buffer
		if err := json.Compact(&b, frame); err != nil {
			c.log.Warn("dropping a message from the upstream that is not JSON", "err", err)
			return true
		}
		frame = b.Bytes()
	}
	m, err := jsonrpc.Decode(frame)
	if err != nil {
		c.log.Warn("dropping a message from the upstream that is not JSON-RPC", "err", err)
		return true
	}
	msgs := []*jsonrpc.Message{m}
	if m.Batch {
		msgs, _ = jsonrpc.DecodeBatch(frame)
	}
	kept := msgs[:0:0]
	for _, m := range msgs {
		switch {
		case m.Method == "" && m.ID == nil:
			c.log.Warn("dropping a message from the upstream that is neither a request nor an answer", "size", len(m.Raw))
			continue
		case m.IsResponse() && pending != nil:
			if _, ok := pending[string(jsonrpc.IDKey(m.ID))]; !ok {
				c.log.Warn("dropping an answer from the upstream to no request of the POST it came on", "id", string(m.ID))
				continue
			}
		}
		if m.IsResponse() {
			delete(pending, string(jsonrpc.IDKey(m.ID)))
			c.noteResponse(m)
		}
		kept = append(kept, m)
	}
	switch {
	case len(kept) == 0:
		return true
	case len(kept) < len(msgs):
		raws := make([][]byte, len(kept))
		for i, m := range kept {
			raws[i] = m.Raw
		}
		if m.Batch {
			frame = append(append([]byte("["), bytes.Join(raws, []byte(","))...), ']')
		} else {
			frame = raws[0]
		}
	}
	select {
	case <-c.done:
		return false // closed: nothing more is delivered
	default:
	}
	select {
	case c.frames <- inbound{frame: frame}:
		return true
	case <-c.done:
		return false
	}
}

// noteResponse learns the x-mcp-header bindings from a stateless tools/list
// result, and takes the protocol version from the initialize result and
// then opens the GET stream.
func (c *Client) noteResponse(m *jsonrpc.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.calls[string(jsonrpc.IDKey(m.ID))]; ok && cl.method == "tools/list" && m.Result != nil {
		learnTools(c.tools, m.Result)
		return
	}
	if c.initID == "" || string(jsonrpc.IDKey(m.ID)) != c.initID || m.Result == nil {
		return
	}
	c.initID = ""
	var r struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(m.Result, &r); err == nil && r.ProtocolVersion != "" {
		c.version = r.ProtocolVersion
	}
	// Protocol 2026-07-28 (SEP-2575) drops the GET stream.
	if c.listening || c.closed || c.version >= "2026-07-28" {
		return
	}
	c.listening = true
	c.wg.Add(1)
	go c.listen()
}
