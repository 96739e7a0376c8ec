package proxy

import (
	"encoding/json"
	"errors"
	"sync"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// Why a session ended, as its end line says (journal.SessionEnd).
const (
	EndClientClosed   = "client closed"
	EndUpstreamExited = "upstream exited"
	EndStopped        = "proxy stopped"
	// EndStoppedReading: the client stopped reading (ErrClientStoppedReading).
	EndStoppedReading = "client stopped reading"
)

// A sessionLog writes the journal lines of a session's start and end, so
// that each execution line's session names an agent run: who the client
// was and how it was connected. It exists only where the interceptor
// keeps a journal.
type sessionLog struct {
	s *Session
	// client is what the transport told (Options.Client), and then what
	// the client's first request says; written inside once only.
	client journal.SessionClient

	once sync.Once // guards the start line: written once, first
}

func newSessionLog(s *Session) *sessionLog {
	if s.opts.Client == nil || !s.opts.Interceptor.Journals() {
		return nil
	}
	return &sessionLog{s: s, client: *s.opts.Client}
}

// request writes the start line at the client's first request, which
// says who the client is: initialize's clientInfo and protocolVersion, or
// a stateless (2026-07-28) request's _meta.
func (l *sessionLog) request(method string, params json.RawMessage) {
	l.once.Do(func() {
		c := &l.client
		c.Protocol, c.Name, c.Version = clientOf(method, params)
		l.write(journal.SessionStart, c, "")
	})
}

// end writes the end line, with what the start line said of the client,
// and the start line first if no request came.
func (l *sessionLog) end(why string) {
	// once also orders request's writes to l.client before the reads here.
	l.once.Do(func() { l.write(journal.SessionStart, &l.client, "") })
	l.write(journal.SessionEnd, &l.client, why)
}

func (l *sessionLog) write(event string, c *journal.SessionClient, note string) {
	l.s.opts.Interceptor.JournalSession(journal.Entry{
		Event:   event,
		Session: l.s.opts.Scope,
		Actor:   l.s.opts.Actor,
		Client:  c,
		Note:    note,
	})
}

// clientOf reads the protocol version and clientInfo a request carries:
// initialize's params, or any other request's _meta, where requests of
// the stateless era (2026-07-28) carry them; "" for what is not there.
func clientOf(method string, params json.RawMessage) (protocol, name, version string) {
	var p struct {
		ProtocolVersion string `json:"protocolVersion"`
		ClientInfo      struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"clientInfo"`
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return "", "", ""
	}
	if method == "initialize" {
		return p.ProtocolVersion, p.ClientInfo.Name, p.ClientInfo.Version
	}
	json.Unmarshal(p.Meta[mcp.MetaProtocolVersion], &protocol)
	json.Unmarshal(p.Meta[mcp.MetaClientInfo], &p.ClientInfo)
	return protocol, p.ClientInfo.Name, p.ClientInfo.Version
}

// endReason says why Run ended: err is what it returns, clientLeft
// whether the client's side closed; Options.EndReason, where set, says
// why the transport closed it.
func (s *Session) endReason(err error, clientLeft bool) string {
	switch {
	case errors.Is(err, ErrUpstreamClosed):
		return EndUpstreamExited
	case errors.Is(err, ErrClientStoppedReading):
		return EndStoppedReading
	case !clientLeft:
		return EndStopped
	}
	if s.opts.EndReason != nil {
		if why := s.opts.EndReason(); why != "" {
			return why
		}
	}
	return EndClientClosed
}
