package proxy

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// batchlessSince is the first protocol version without JSON-RPC batches:
// 2025-06-18 removed them (its changelog, PR #416). Servers of that
// version fail on one: the go-sdk's exits ("JSON-RPC batching is not
// supported in 2025-06-18 and later"), with every call under way on it,
// and others never answer it.
const batchlessSince = "2025-06-18"

// batchless reports whether the protocol version v has no batches: a
// date, YYYY-MM-DD, no earlier than batchlessSince. "" (no initialize
// result yet) or a version that is no date keeps them, as the versions
// before it did.
func batchless(v string) bool {
	if _, err := time.Parse(time.DateOnly, v); err != nil {
		return false
	}
	return v >= batchlessSince // dates of one width compare as text
}

// noteProtocolLocked notes the version the session speaks when m, from
// the upstream, is the result of f, the client's initialize: the
// protocolVersion the client is about to get. Its params become the
// handshake a restarted upstream is given. One that failed is not: the
// client, told so, initializes again, and a server given it already
// would refuse that as a second initialize. A result naming a version the
// proxy does not know is not noted either: it returns the error the
// client gets instead (unknownAgreed), nil otherwise. s.mu must be held.
func (s *Session) noteProtocolLocked(f forwardedRequest, m *jsonrpc.Message) []byte {
	if f.method != "initialize" || m.Result == nil {
		return nil
	}
	version, isString := jsonrpc.StringValue(jsonrpc.Member(m.Result, "protocolVersion"))
	if isString && !mcp.Negotiable(version) {
		s.log.Warn("refused the initialize result: the MCP server agreed on a protocol version the proxy does not know",
			"protocol", version, "known", mcp.Versions)
		return unknownAgreed(m.ID, version)
	}
	s.protocol = version
	s.toolsChange = string(jsonrpc.Member(jsonrpc.Member(jsonrpc.Member(m.Result, "capabilities"), "tools"), "listChanged")) == "true"
	if f.handshake != nil {
		s.handshake = f.handshake
	}
	return nil
}

// fromClientBatchless handles frame, a batch from the client, in a
// session whose protocol has no batches, and reports whether it did: it
// does not when the protocol has them, nor for a batch that cannot be
// read or is empty, which fromClientBatch refuses as in any session.
//
// Nothing of it goes upstream as a batch. One holding a request is
// refused whole: its requests are answered with errors, and the client
// sends them again one per line. Its notifications are not sent either,
// or they would go twice then. Its answers to the upstream's requests
// and its cancellations are acted on all the same, each as if alone: the
// upstream waits on an answer, and a cancellation concerns what was sent
// before. A batch without a request is handled as its messages would be
// one per line, in order: no answer could tell the client it was dropped.
func (s *Session) fromClientBatchless(ctx context.Context, frame []byte) bool {
	s.mu.Lock()
	v := s.protocol
	s.mu.Unlock()
	if !batchless(v) {
		return false
	}
	msgs, err := jsonrpc.DecodeBatch(frame)
	if err != nil || len(msgs) == 0 {
		return false
	}
	requests := slices.ContainsFunc(msgs, (*jsonrpc.Message).IsRequest)
	dropped := 0
	for _, m := range msgs {
		switch {
		case m.Batch:
			s.badAnswer(m) // an array is no message, in a batch as today
		case !requests || m.Method == "" || m.Method == "notifications/cancelled":
			s.fromClient(ctx, m.Raw)
		case m.IsNotification():
			dropped++
		}
	}
	if requests {
		s.log.Warn("refused a batch from the client: its protocol has no batches", "protocol", v, "notifications_dropped", dropped)
		s.refuseBatch(msgs, fmt.Sprintf("mcp-idempotent: a session of protocol %s takes one message per line, not a batch; "+
			"the batch's requests and notifications were not sent: send each on a line of its own", v))
	}
	return true
}
