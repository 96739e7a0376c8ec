package proxy

import (
	"encoding/json"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// The client's messages reach the upstream in the order they came, as
// they would without the proxy: a write sent after another must not run
// before it. A tools/call of a tool the proxy has not seen listed waits
// for a listing, and that wait is not the reading goroutine's: it would
// stop the client's answers to the upstream's own requests too (roots/list,
// sampling), which the upstream may need before it answers the listing.
// So the call goes to a queue run on a goroutine of its own, and the
// messages that come after it for the upstream join the queue, in order,
// until it is empty. Answers to the upstream's requests and cancellations
// never wait in it, nor do pings: a ping changes nothing, so has no order
// to keep, and MCP asks for a prompt answer to it (basic/utilities/ping).
// A client may end the session on a late one: the Go SDK's keep-alive
// waits half its interval, and a listing may take ten seconds. While no
// call waits for a listing, which is the common case, messages are
// handled as they are read, with no queue.

// A queued message waits for those before it: a tools/call, taken and
// registered already (startToolCall), or another message for the upstream.
type queued struct {
	call *clientCall
	msg  *jsonrpc.Message // a copy: a request, a notification or a batch
	key  string           // msg's id as a key, for a request; else ""
}

// startQueue runs the queue, the lookup of c's tool first. It is called on
// the reading goroutine when no queue runs, c just registered.
func (s *Session) startQueue(c *clientCall) {
	s.qmu.Lock()
	s.queueing.Store(true)
	s.qmu.Unlock()
	// Shutdown waits for what the queue still holds as for calls: a
	// request read before the client left is sent. c is counted, so the
	// count is not zero here, as an Add concurrent with Wait needs.
	s.inflight.Start()
	go s.runQueue(queued{call: c})
}

// enqueue adds q to the queue if one runs, and reports whether it did.
func (s *Session) enqueue(q queued) bool {
	if !s.queueing.Load() {
		return false
	}
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if !s.queueing.Load() {
		return false // it has just ended: what came before q is handled
	}
	s.queue = append(s.queue, q)
	return true
}

// enqueueMessage is enqueue for msg, a message for the upstream that is
// not a tools/call: a copy of it waits (its bytes are the frame read,
// which is the session's to keep).
func (s *Session) enqueueMessage(msg *jsonrpc.Message) bool {
	if !s.queueing.Load() {
		return false
	}
	m := *msg
	var key string
	if m.IsRequest() {
		key = string(jsonrpc.IDKey(m.ID))
	}
	return s.enqueue(queued{msg: &m, key: key})
}

// runQueue handles q, then what waits behind it, in order, until the queue
// is empty.
func (s *Session) runQueue(q queued) {
	for {
		s.handleQueued(q)
		s.qmu.Lock()
		if len(s.queue) == 0 {
			s.queue = nil
			s.queueing.Store(false)
			s.qmu.Unlock()
			s.inflight.Done()
			return
		}
		q = s.queue[0]
		s.queue[0] = queued{}
		s.queue = s.queue[1:]
		s.qmu.Unlock()
	}
}

func (s *Session) handleQueued(q queued) {
	switch m := q.msg; {
	case q.call != nil:
		c := q.call
		info, ok := s.tools.cached(c.call.Name)
		if !ok {
			info = s.lookupTool(c)
		}
		s.resumeToolCall(c, info)
	case m.Batch:
		s.fromClientBatch(m.Raw)
	case m.Method == "notifications/cancelled":
		s.cancelled(m) // in shadow mode, behind the request it names (cancelInTurn)
	case m.IsRequest():
		s.forward(m, nil, nil)
	default:
		s.notifyUpstream(m)
	}
}

// unqueue drops the client's request under key, which it cancelled, if it
// still waits in the queue, alone or in a batch: never sent, it is owed
// nothing. A tools/call is not here: it is registered, and its
// cancellation finds it there.
func (s *Session) unqueue(key string) bool {
	if !s.queueing.Load() {
		return false
	}
	s.qmu.Lock()
	defer s.qmu.Unlock()
	for i, q := range s.queue {
		switch {
		case q.call != nil:
		case q.key == key:
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return true
		case q.msg.Batch:
			msgs, err := jsonrpc.DecodeBatch(q.msg.Raw)
			if err != nil {
				continue
			}
			rest, frame := takeOut(msgs, q.msg.Raw, func(m *jsonrpc.Message) bool {
				return m.IsRequest() && string(jsonrpc.IDKey(m.ID)) == key
			})
			switch {
			case len(rest) == len(msgs):
				continue
			case len(rest) == 0:
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
			default:
				s.queue[i].msg = &jsonrpc.Message{Raw: frame, Batch: true}
			}
			return true
		}
	}
	return false
}

// cancelInTurn queues msg, the client's cancellation of request id, behind
// that request if it still waits to be sent, in shadow mode, and reports
// whether it did. Normal mode drops such a request, or detaches its
// caller, and the cancellation with it; shadow mode sends what the
// client sent, as it would reach the upstream without the proxy.
func (s *Session) cancelInTurn(msg *jsonrpc.Message, id json.RawMessage) bool {
	if !s.queueing.Load() || s.opts.Interceptor == nil || !s.opts.Interceptor.Shadow() {
		return false
	}
	key := string(jsonrpc.IDKey(id))
	s.mu.Lock()
	c := s.calls[key]
	s.mu.Unlock()
	waits := false
	if c != nil {
		c.mu.Lock()
		waits = !c.passThrough
		c.mu.Unlock()
	}
	// If the queue ends meanwhile, the request was handled: the
	// cancellation goes as for one sent (cancelled).
	return (waits || s.queued(key)) && s.enqueueMessage(msg)
}

// queued reports whether the client's request under key, not a
// tools/call, waits in the queue, alone or in a batch.
func (s *Session) queued(key string) bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	for _, q := range s.queue {
		if q.call == nil && (q.key == key || q.msg.Batch && batchHolds(q.msg.Raw, key)) {
			return true
		}
	}
	return false
}

// batchHolds reports whether frame, a batch of the client's, holds a
// request under key. Only a cancellation while a queue runs asks it.
func batchHolds(frame []byte, key string) bool {
	msgs, err := jsonrpc.DecodeBatch(frame)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if m.IsRequest() && string(jsonrpc.IDKey(m.ID)) == key {
			return true
		}
	}
	return false
}

// enqueueBatch is enqueue for a batch, frame. Its answers to requests of
// the upstream's and its cancellations must not wait: they are handled at
// once, and the rest of the batch waits, as a batch of its own. Neither
// is answered (JSON-RPC 2.0, batch), so the client still gets one array
// for the batch's requests. The rest is queued first: a cancellation of
// one of its requests finds it waiting (unqueue, cancelInTurn).
func (s *Session) enqueueBatch(frame []byte) bool {
	if !s.queueing.Load() {
		return false
	}
	msgs, err := jsonrpc.DecodeBatch(frame)
	if err != nil {
		return false // refused at once, as it would be in its turn
	}
	rest, restFrame := takeOut(msgs, frame, waitsForNothing)
	if len(rest) == 0 || !s.enqueue(queued{msg: &jsonrpc.Message{Raw: restFrame, Batch: true}}) {
		return false // handled whole at once: the queue may have just ended
	}
	if len(rest) < len(msgs) {
		_, now := takeOut(msgs, frame, func(m *jsonrpc.Message) bool { return !waitsForNothing(m) })
		s.fromClientBatch(now)
	}
	return true
}

// waitsForNothing reports whether m, a message of a batch of the
// client's, goes at once while a queue runs: an answer to a request of
// the upstream's, which it may need before it answers the listing, or a
// cancellation.
func waitsForNothing(m *jsonrpc.Message) bool {
	return m.Method == "" || m.Method == "notifications/cancelled"
}
