package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// ask is one of the proxy's own requests to the client, waiting for its
// answer.
type ask struct {
	done func(json.RawMessage, error)
	// related is the key of the client's request it was asked for: its
	// cancellation goes where it went.
	related string
	// stop stops its cancellation when the asker's context ends; nil if
	// there is none.
	stop func() bool
}

// errAskSessionEnded is what an ask gets when no answer can come.
var errAskSessionEnded = fmt.Errorf("asking the client: %w", intercept.ErrSessionEnded)

// CanAsk implements intercept.Asker.
func (c *clientCall) CanAsk() bool {
	s := c.s
	if s.clientStateless {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A client that sent no initialize (2026-07-28) declared nothing.
	return s.elicitForm && !s.asksEnded
}

// Ask implements intercept.Asker: elicitation/create goes to the client
// under an id of the proxy's, beside the call it is asked for.
func (c *clientCall) Ask(ctx context.Context, params json.RawMessage, done func(json.RawMessage, error)) {
	s := c.s
	var buf [64]byte
	id := string(append(strconv.AppendInt(append(buf[:0], s.askPrefix...), s.nextAsk.Add(1), 10), '"'))
	if err := ctx.Err(); err != nil {
		done(nil, err)
		return
	}
	s.mu.Lock()
	if s.asksEnded {
		s.mu.Unlock()
		done(nil, errAskSessionEnded)
		return
	}
	if s.asks == nil {
		s.asks = make(map[string]ask)
	}
	// Waiting before it is written: the answer may come before the write
	// returns.
	s.asks[id] = ask{done: done, related: c.key()}
	s.mu.Unlock()

	if err := s.writeRelated(jsonrpc.NewRequest(json.RawMessage(id), "elicitation/create", params), c.key()); err != nil {
		if a, ok := s.takeAsk(id); ok {
			a.done(nil, fmt.Errorf("writing elicitation/create to the client: %w", err))
		}
		return
	}
	if ctx.Done() == nil {
		return
	}
	stop := context.AfterFunc(ctx, func() { s.cancelAsk(id, ctx.Err()) })
	s.mu.Lock()
	a, still := s.asks[id]
	if still {
		a.stop = stop
		s.asks[id] = a
	}
	s.mu.Unlock()
	if !still {
		stop() // answered already
	}
}

// Progress implements intercept.Asker. A call already answered or
// detached gets none: its caller may have cancelled it before the proxy
// came to tell it (an attach made after the cancel), and its token is
// the client's again.
func (c *clientCall) Progress(message string) {
	token := progressToken(c.call.Meta)
	if token == nil {
		return
	}
	n, ok := c.s.noteOwnProgress(c, token)
	if !ok {
		return
	}
	b := append([]byte(`{"progressToken":`), token...)
	b = append(strconv.AppendInt(append(b, `,"progress":`...), n-1, 10), `,"message":`...)
	b = append(jsonrpc.AppendString(b, message), '}')
	// On HTTP the token takes it to the call's stream.
	c.s.writeClient(jsonrpc.NewRequest(nil, "notifications/progress", b))
}

// progressToken returns the progress token of a request's _meta as it
// came, or nil for none. Of two, the first counts, as for the HTTP
// transport, which routes progress by it.
func progressToken(meta json.RawMessage) json.RawMessage {
	var token json.RawMessage
	jsonrpc.EachMember(meta, func(name, value []byte) bool {
		if string(name) == mcp.MetaProgressToken {
			token = value
			return false
		}
		return true
	})
	if string(token) == "null" {
		return nil
	}
	return token
}

// writeRelated writes frame to the client beside its request under the
// key related, where the Conn can tell (relatedWriter).
func (s *Session) writeRelated(frame []byte, related string) error {
	if s.clientRelated != nil {
		return s.clientRelated.WriteRelated(frame, related)
	}
	return s.client.WriteFrame(frame)
}

// takeAsk removes the ask under id and returns it, if it still waits:
// whoever takes it calls its done.
func (s *Session) takeAsk(id string) (ask, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.asks[id]
	delete(s.asks, id)
	return a, ok
}

// cancelAsk gives up on the ask under id when its asker's context ends
// with err, and tells the client (notifications/cancelled), which may
// then take its question away from the user.
func (s *Session) cancelAsk(id string, err error) {
	s.mu.Lock()
	a, ok := s.asks[id]
	delete(s.asks, id)
	if ok {
		s.giveUpLocked(id)
	}
	s.mu.Unlock()
	if !ok {
		return // answered meanwhile
	}
	if werr := s.writeRelated(cancellation(id, err), a.related); werr != nil {
		s.log.Debug("writing to the client", "err", werr)
	}
	a.done(nil, err)
}

// askAnswered hands the client's answer msg, under an id in the proxy's
// ask space, to the ask that waits on it. It never goes upstream: the
// upstream asked nothing under that id.
func (s *Session) askAnswered(msg *jsonrpc.Message) {
	key := string(jsonrpc.IDKey(msg.ID))
	a, ok := s.takeAsk(key)
	if !ok {
		s.mu.Lock()
		_, withdrawn := s.givenUp[key]
		delete(s.givenUp, key)
		s.mu.Unlock()
		if withdrawn {
			// The user answered after the proxy stopped waiting: its
			// question was withdrawn, and the client told so.
			s.log.Info("dropped the client's answer to a question the proxy withdrew: no answer came in time, or its call ended", "id", string(msg.ID))
			return
		}
		s.log.Warn("dropped an answer from the client to no question of the proxy's", "id", string(msg.ID))
		return
	}
	if a.stop != nil {
		a.stop()
	}
	a.done(clientOutcome(msg))
}

// clientOutcome is what the client's answer msg to elicitation/create
// says, as outcomeOf reads an upstream's: its result, or an error. An
// answer that is no response is the client's, never the upstream's.
func clientOutcome(msg *jsonrpc.Message) (json.RawMessage, error) {
	result, err := outcomeOf("elicitation/create", msg)
	var m *retry.MalformedError
	if errors.As(err, &m) {
		return nil, &intercept.MalformedAnswerError{What: m.What}
	}
	return result, err
}

// askAnswers takes the answers to the proxy's asks out of a batch from
// the client and acts on them. It returns the rest of the batch and its
// frame, which is frame itself when the batch held none.
func (s *Session) askAnswers(msgs []*jsonrpc.Message, frame []byte) ([]*jsonrpc.Message, []byte) {
	return takeOut(msgs, frame, func(m *jsonrpc.Message) bool {
		if m.IsResponse() && idHasPrefix(m.ID, s.askPrefix) {
			s.askAnswered(m)
			return true
		}
		return false
	})
}

// endAsks fails every ask still waiting, and every ask after it: the
// client has gone, or the session is ending, and no answer can come.
func (s *Session) endAsks() {
	s.mu.Lock()
	s.asksEnded = true
	asks := s.asks
	s.asks = nil
	s.mu.Unlock()
	for _, a := range asks {
		if a.stop != nil {
			a.stop()
		}
		a.done(nil, errAskSessionEnded)
	}
}

// clientSpaceID reports whether id, of a request the upstream sends the
// client, is in a space of ids the proxy gives its requests to the
// client: its own questions (Ask), and those of a restarted upstream's
// (openServerRequestLocked).
func (s *Session) clientSpaceID(id json.RawMessage) bool {
	return idHasPrefix(id, s.askPrefix) || idHasPrefix(id, s.serverPrefix)
}

// refuseAskID answers a request of the upstream's under an id in a space
// of the proxy's (clientSpaceID), which does not pass on: the client's
// answer to it would be taken for the answer to another request.
func (s *Session) refuseAskID(l *link, id json.RawMessage) {
	s.log.Warn("refused a request from the upstream under an id of the proxy's", "id", string(id))
	e := jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "mcp-idempotent: request ids starting with %s or %s are reserved for the proxy's own requests to the client", s.askPrefix[1:], s.serverPrefix[1:])
	if err := l.conn.WriteFrame(jsonrpc.NewErrorResponse(id, e)); err != nil {
		s.log.Debug("writing to the upstream", "err", err)
	}
}

// elicitsForm reports whether initialize params declare the elicitation
// capability in form mode: "elicitation": {} (2025-06-18; and 2025-11-25,
// where an empty object means form mode only), or with a "form" member
// (2025-11-25, client/elicitation, "Capabilities"). "url" alone is not
// form mode. A member given twice, which readers may take either way,
// declares nothing.
func elicitsForm(params json.RawMessage) bool {
	caps, ok := onlyMember(params, "capabilities")
	if !ok {
		return false
	}
	el, ok := onlyMember(caps, "elicitation")
	if !ok {
		return false
	}
	empty, form := true, false
	read := jsonrpc.Reading{Names: []string{"form"}}
	if jsonrpc.EachMember(el, func(name, value []byte) bool {
		empty = false
		if read.Note(name) == 0 {
			form = len(value) > 0 && value[0] == '{'
		}
		return true
	}) != nil {
		return false // not an object
	}
	return read.Err() == nil && (empty || form)
}

// onlyMember returns the member name of the JSON object obj, if obj is
// an object that has it once, in that spelling only.
func onlyMember(obj json.RawMessage, name string) (json.RawMessage, bool) {
	v, err := jsonrpc.MemberOnce(obj, name)
	return v, err == nil && v != nil
}
