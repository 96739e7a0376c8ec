package journal

// Events of the lines about a client session (Entry.Event).
const (
	// SessionStart is written when the client's first request is seen
	// (initialize, where the client sends one), so that its name is known.
	SessionStart = "session_start"
	// SessionEnd is written when the session ends; Entry.Note says why,
	// where the proxy knows.
	SessionEnd = "session_end"
)

// A SessionClient says who is at the other end of a client session, as far
// as the proxy can tell. Members it cannot tell are absent.
type SessionClient struct {
	Transport string `json:"transport"` // "stdio" or "http"
	// MCPSessionID is the session's Mcp-Session-Id, over HTTP.
	MCPSessionID string `json:"mcp_session_id,omitempty"`
	// Protocol is the protocol version the client asked for: in its
	// initialize request, or in its first request's _meta.
	Protocol string `json:"protocol_version,omitempty"`
	// Name and Version are the client's clientInfo.
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
	// Remote is the client's address, over HTTP.
	Remote string `json:"remote,omitempty"`
	// Parent is the process that runs the proxy, over stdio: the client,
	// where the operating system tells (Linux).
	Parent *Parent `json:"parent,omitempty"`
}

// A Parent is a process, as /proc names it.
type Parent struct {
	PID     int    `json:"pid"`
	Command string `json:"command,omitempty"`
}
