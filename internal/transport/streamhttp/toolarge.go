package streamhttp

import (
	"encoding/json"
	"net/http"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// A dropState is what the messages over the size limit dropped from one
// POST's event stream, and its resumptions, left.
type dropState struct {
	dropped bool // one was dropped
	// lost: one may have been the answer to a request still waiting,
	// though it does not say which. The stream is not resumed for it:
	// the server, which sent that answer, may hold a resumed stream open
	// with nothing more to send.
	lost bool
	// resp is the answer to the POST, whose status goes with the
	// account of an answer dropped, as when it is dropped from a JSON
	// body; nil on the GET stream, which answers no request.
	resp *http.Response
}

// dropTooLarge handles a message from the server over the size limit,
// dropped from a stream. head holds its first bytes, and late, if not
// nil, stands for the ids the rest gave that head left unanswered for
// (jsonrpc.LateHead). On a POST's stream, whose requests still waiting
// are pending, an answer to one of them answers it now, with the limit
// named, as over stdio: a tools/call's outcome is unknown. Anything else,
// and anything on the GET stream (pending nil), is the caller's to handle
// (a request of the server's waits for an answer), as a
// MessageTooLargeError from ReadFrame, a second one for late. It reports
// false once the Client is closed.
func (c *Client) dropTooLarge(head, late []byte, pending map[string]json.RawMessage, st *dropState) bool {
	st.dropped = true
	ok, told := c.dropHead(head, pending, st.resp)
	if late != nil {
		var lateTold bool
		ok, lateTold = c.dropHead(late, pending, st.resp)
		told = told || lateTold
	}
	st.lost = st.lost || !told
	return ok
}

// dropHead is dropTooLarge for one head. told says that pending is left
// with no request the message may have answered: it was a request or a
// notification, or named its ids. resp is the POST's answer, if pending
// is not nil.
func (c *Client) dropHead(head []byte, pending map[string]json.RawMessage, resp *http.Response) (ok, told bool) {
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
		// drops one.
		c.answer(answered, noAnswer(resp, "the upstream's answer was dropped: "+tooLarge(c.max)))
		return true, len(ids) > 0
	}
	// A request of the server's, or, undecided, an answer whose "result"
	// comes after its first bytes.
	told = pending == nil || kind == jsonrpc.HeadOfRequest || len(ids) > 0 && !anyPending(ids, pending)
	e := &MessageTooLargeError{Limit: c.max, Head: head}
	select {
	case <-c.done:
		return false, told
	default:
	}
	select {
	case c.frames <- inbound{tooLarge: e}:
		return true, told
	case <-c.done:
		return false, told
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

// dropBody handles body, the first bytes of a JSON body over the size
// limit, of which resp.Body holds what is left, as dropTooLarge does an
// event's. It returns why pending's requests are left unanswered, and
// whether the body may have been their answer (answer): the answer they
// wait for, if its first bytes say so and name its ids, is the caller's
// to answer at once. Else the rest is followed to its end for the ids
// after them.
func (c *Client) dropBody(resp *http.Response, body []byte, pending map[string]json.RawMessage) (reason string, answer bool) {
	const dropped = "the upstream's answer was dropped: "
	head := body[:min(len(body), headSize)]
	ids, kind := jsonrpc.HeadMessage(head)
	if kind == jsonrpc.HeadOfAnswer && len(ids) > 0 {
		c.log.Error("dropped an answer from the upstream over the size limit", "limit", c.max)
		return dropped + tooLarge(c.max), true
	}
	var tail jsonrpc.TailScan
	tail.Scan(body)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		tail.Scan(buf[:n])
		if err != nil {
			break
		}
	}
	late := jsonrpc.LateHead(tail.LateIDs(len(head), kind))
	st := dropState{resp: resp}
	c.dropTooLarge(head, late, pending, &st)
	if st.lost {
		return dropped + tooLarge(c.max), true
	}
	return "upstream response ended without an answer, after a " + tooLarge(c.max) + " was dropped from it", false
}
