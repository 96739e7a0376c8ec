package proxy

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// While a call waits for its approval, the proxy tells the caller
// notifications/progress 0, 1, 2... on the call's progress token. MCP asks
// progress on a token to increase, and the upstream's own, once the call
// is sent, counts from its start: so the upstream's progress on a token
// the proxy told n notifications on goes to the client raised by n, and
// its total with it.

// noteOwnProgress counts one more notifications/progress of the proxy's
// on token, c's, and returns how many that makes; false, and none
// counted, once c has ended (release), which forgets the count: one
// noted after it would raise the progress of a later request on the
// token.
func (s *Session) noteOwnProgress(c *clientCall, token json.RawMessage) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.progress == progressEnded {
		return 0, false
	}
	c.progress++
	n := c.progress
	if s.ownProgress == nil {
		s.ownProgress = make(map[string]int64)
	}
	s.ownProgress[string(jsonrpc.IDKey(token))] = n
	return n, true
}

// upstreamProgress returns frame, the upstream's notifications/progress
// msg, as the client gets it: on the client's token, where it names one
// the proxy gave a call in its place (progresstoken.go), and raised past
// the proxy's own progress on it, if there was any. It returns nil to
// drop it.
func (s *Session) upstreamProgress(frame []byte, msg *jsonrpc.Message) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upstreamProgressLocked(frame, msg)
}

// upstreamProgressLocked is upstreamProgress with s.mu held; frame is
// msg's own, alone or in a batch.
func (s *Session) upstreamProgressLocked(frame []byte, msg *jsonrpc.Message) []byte {
	if len(s.tokens) == 0 || msg.Params == nil {
		return frame
	}
	var token []byte
	read := jsonrpc.Reading{Names: []string{"progressToken", "progress", "total"}}
	if jsonrpc.EachMember(msg.Params, func(name, value []byte) bool {
		if read.Note(name) == 0 && token == nil {
			token = value
		}
		return true
	}) != nil || token == nil {
		return frame
	}
	t, ok := s.tokens[string(jsonrpc.IDKey(token))]
	switch {
	case !ok && idHasPrefix(token, s.idPrefix):
		// One the proxy gave and let go of (maxTokens): whose, it no
		// longer knows, and the client never gave it.
		s.log.Debug("dropped the upstream's progress on a token of the proxy's it no longer holds", "token", string(token))
		return nil
	case !ok:
		return frame // a request passed through: the token is the client's
	case t.detached():
		s.log.Debug("dropped the upstream's progress on a call its caller cancelled", "token", string(token))
		return nil
	}
	if err := read.Err(); err != nil {
		// Either way, one reading of it would go back.
		s.log.Warn("dropped the upstream's progress on a token of the proxy's: its params are ambiguous", "err", err)
		return nil
	}
	if !within(frame, msg.Params) {
		return nil // not a part of frame, as decoded messages' params are: not reached
	}
	n := t.told
	if t.call != nil {
		n = s.ownProgress[string(jsonrpc.IDKey(t.client))]
	}
	if n == 0 {
		return jsonrpc.Replace(frame, token, t.client)
	}
	params := clientProgress(msg.Params, t.client, n)
	if params == nil {
		s.log.Warn("dropped the upstream's progress on a token the proxy told progress on: its progress is not a number")
		return nil
	}
	return jsonrpc.Replace(frame, msg.Params, params)
}

// within reports whether part is a subslice of frame.
func within(frame, part []byte) bool {
	off := cap(frame) - cap(part)
	return len(part) > 0 && off >= 0 && off+len(part) <= len(frame) && &frame[off] == &part[0]
}

// clientProgress returns the params of a notifications/progress on the
// client's token, with progress and total raised by n, or nil if either
// is not a number.
func clientProgress(params, token json.RawMessage, n int64) json.RawMessage {
	out := make([]byte, 0, len(params)+len(token)+16)
	out = append(out, '{')
	ok := true
	_ = jsonrpc.EachMember(params, func(name, value []byte) bool {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(jsonrpc.AppendString(out, string(name)), ':')
		switch {
		case string(name) == "progressToken":
			value = token
		case string(name) == "progress" || string(name) == "total":
			v, err := strconv.ParseFloat(string(value), 64)
			if ok = err == nil && !math.IsInf(v+float64(n), 0); !ok {
				return false
			}
			value = strconv.AppendFloat(nil, v+float64(n), 'f', -1, 64)
		}
		out = append(out, value...)
		return true
	})
	if !ok {
		return nil
	}
	return append(out, '}')
}
