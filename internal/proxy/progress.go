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

// noteOwnProgress notes that the proxy has sent n notifications/progress
// on token.
func (s *Session) noteOwnProgress(token json.RawMessage, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ownProgress == nil {
		s.ownProgress = make(map[string]int64)
	}
	s.ownProgress[string(jsonrpc.IDKey(token))] = n
}

// forgetOwnProgress drops token, whose call has been answered.
func (s *Session) forgetOwnProgress(token json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ownProgress, string(jsonrpc.IDKey(token)))
}

// upstreamProgress returns frame, the upstream's notifications/progress
// msg, as the client gets it: raised past the proxy's own progress on its
// token, if there was any. It returns nil to drop it.
func (s *Session) upstreamProgress(frame []byte, msg *jsonrpc.Message) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upstreamProgressLocked(frame, msg)
}

// upstreamProgressLocked is upstreamProgress with s.mu held; frame is
// msg's own, alone or in a batch.
func (s *Session) upstreamProgressLocked(frame []byte, msg *jsonrpc.Message) []byte {
	if len(s.ownProgress) == 0 && len(s.silenced) == 0 || msg.Params == nil {
		return frame
	}
	var token []byte
	read := jsonrpc.Reading{Names: []string{"progressToken", "progress", "total"}}
	if jsonrpc.EachMember(msg.Params, func(name, value []byte) bool {
		if read.Note(name) == 0 {
			token = value
		}
		return true
	}) != nil || token == nil {
		return frame
	}
	if s.silenced[string(jsonrpc.IDKey(token))] {
		s.log.Debug("dropped the upstream's progress on a call its caller cancelled", "token", string(token))
		return nil
	}
	n, ok := s.ownProgress[string(jsonrpc.IDKey(token))]
	if !ok {
		return frame
	}
	if err := read.Err(); err != nil {
		// Raised either way, one reading of it would go back.
		s.log.Warn("dropped the upstream's progress on a token the proxy told progress on: its params are ambiguous", "err", err)
		return nil
	}
	params := raised(msg.Params, n)
	if params == nil {
		s.log.Warn("dropped the upstream's progress on a token the proxy told progress on: its progress is not a number")
		return nil
	}
	if off := cap(frame) - cap(msg.Params); off < 0 || off+len(msg.Params) > len(frame) || &frame[off] != &msg.Params[0] {
		return nil // not a part of frame, as decoded messages' params are: not reached
	}
	return jsonrpc.Replace(frame, msg.Params, params)
}

// raised returns the params of a notifications/progress with progress and
// total raised by n, or nil if either is not a number.
func raised(params json.RawMessage, n int64) json.RawMessage {
	out := make([]byte, 0, len(params)+16)
	out = append(out, '{')
	ok := true
	_ = jsonrpc.EachMember(params, func(name, value []byte) bool {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(jsonrpc.AppendString(out, string(name)), ':')
		if string(name) == "progress" || string(name) == "total" {
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

// maxSilenced bounds the progress tokens of cancelled calls a session
// keeps silencing; past it, the oldest is let go.
const maxSilenced = 1024

// silenceProgress stops the upstream's progress on token, the progress
// token of a call whose caller cancelled it and was detached. The
// execution goes on upstream, and its progress would name a request the
// client ended: MCP lets progress name active requests only. The token
// is let go once a new request of the client's carries it
// (unsilenceProgress).
func (s *Session) silenceProgress(token json.RawMessage) {
	if token == nil {
		return
	}
	key := string(jsonrpc.IDKey(token))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.silenced == nil {
		s.silenced = make(map[string]bool)
	}
	if s.silenced[key] {
		return
	}
	if len(s.silencedOrder) >= maxSilenced {
		delete(s.silenced, s.silencedOrder[0])
		s.silencedOrder = s.silencedOrder[1:]
	}
	s.silenced[key] = true
	s.silencedOrder = append(s.silencedOrder, key)
	s.silencing.Store(true)
}

// unsilenceProgress lets go of the progress token that params, a
// request's of the client's, carries: a token of a cancelled call may be
// used again, and the new request's progress is the client's to see.
func (s *Session) unsilenceProgress(params json.RawMessage) {
	if !s.silencing.Load() || params == nil {
		return
	}
	var meta []byte
	jsonrpc.EachMember(params, func(name, value []byte) bool {
		if string(name) == "_meta" {
			meta = value
			return false
		}
		return true
	})
	token := progressToken(meta)
	if token == nil {
		return
	}
	key := string(jsonrpc.IDKey(token))
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.silenced[key] {
		return
	}
	delete(s.silenced, key)
	for i, k := range s.silencedOrder {
		if k == key {
			s.silencedOrder = append(s.silencedOrder[:i], s.silencedOrder[i+1:]...)
			break
		}
	}
	s.silencing.Store(len(s.silenced) > 0)
}
