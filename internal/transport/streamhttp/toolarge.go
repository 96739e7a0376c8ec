package streamhttp

import (
	"encoding/json"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// A dropState is what the messages over the size limit dropped from one
// POST's event stream, and its resumptions, left.
type dropState struct {
	dropped bool // one was dropped
	// lost: one may have been the answer to a request still waiting,
	// though its first bytes do not say which. The stream is not resumed
	// for it: the server, which sent that answer, may hold a resumed
	// stream open with nothing more to send.
	lost bool
}

// dropTooLarge handles a message from the server over the size limit,
// of which head holds the first bytes, dropped from a stream: on a POST's,
// whose requests still waiting are pending, an answer to one of them
// answers it now, with the limit named, as over stdio: a tools/call's
// outcome is unknown. Anything else, and anything on the GET stream
// (pending nil), is the caller's to handle (a request of the server's
// waits for an answer), as a MessageTooLargeError from ReadFrame. It
// reports false once the Client is closed.
func (c *Client) dropTooLarge(head []byte, pending map[string]json.RawMessage, st *dropState) bool {
	st.dropped = true
	ids, kind := jsonrpc.HeadMessage(head)
	if pending != nil && kind == jsonrpc.HeadOfAnswer {
		c.log.Error("dropped an answer from the upstream over the size limit", "limit", c.max)
		var answered []json.RawMessage
		for _, id := range ids {
			if p, ok := pending[string(jsonrpc.IDKey(id))]; ok {
				answered = append(answered, p)
				delete(pending, string(jsonrpc.IDKey(id)))
			}
		}
		// An answer to no request of the POST is dropped, as deliver
		// drops one; one without an id in its head may be any's.
		st.lost = st.lost || len(ids) == 0
		c.answer(answered, jsonrpc.NoAnswer{Reason: "the upstream's answer was dropped: " + tooLarge(c.max)})
		return true
	}
	if pending != nil && kind == jsonrpc.HeadUndecided {
		// A request of the server's, or an answer whose "result" comes
		// after its first bytes.
		st.lost = st.lost || len(ids) == 0 || anyPending(ids, pending)
	}
	e := &MessageTooLargeError{Limit: c.max, Head: head}
	select {
	case <-c.done:
		return false
	default:
	}
	select {
	case c.frames <- inbound{tooLarge: e}:
		return true
	case <-c.done:
		return false
	}
}

// anyPending reports whether one of ids is that of a request in pending.
func anyPending(ids []json.RawMessage, pending map[string]json.RawMessage) bool {
	for _, id := range ids {
		if _, ok := pending[string(jsonrpc.IDKey(id))]; ok {
			return true
		}
	}
	return false
}
