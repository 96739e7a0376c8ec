// Package mcp holds the shapes of MCP that the proxy reads and makes: a
// tools/call's params and their parsing, a tools/list page, the tool
// results the proxy writes itself, and the _meta keys, each defined once
// for every package that uses it.
package mcp

// _meta keys of the proxy's own.
const (
	// MetaKey and MetaKeyCommon name, in a call's _meta, the client's own
	// idempotency key: the proxy's spelling, and the common one.
	MetaKey       = "mcp-idempotent/key"
	MetaKeyCommon = "idempotencyKey"
	// MetaDeadline names, in a call's _meta, the client's deadline for the
	// call: a positive whole number of milliseconds from its arrival. It
	// can only shorten the tool's retry deadline (policy
	// RetryRule.Deadline): a client that waits less than the policy allows
	// says so, and the proxy stops waiting for it sooner.
	MetaDeadline = "mcp-idempotent/deadline_ms"
	// MetaExecutionID carries the execution id upstream in a call's _meta
	// (forward_key).
	MetaExecutionID = "mcp-idempotent/execution-id"
	// MetaReplayed, MetaExecution and MetaOutcome are what the proxy adds
	// to the _meta of the results it answers from the record.
	MetaReplayed  = "mcp-idempotent/replayed"
	MetaExecution = "mcp-idempotent/execution"
	MetaOutcome   = "mcp-idempotent/outcome"
)

// _meta keys of the protocol's.
const (
	// MetaProgressToken asks for progress notifications about a request.
	MetaProgressToken = "progressToken"
	// MetaProtocol starts the keys the protocol reserves for itself.
	MetaProtocol = "io.modelcontextprotocol/"
	// MetaProtocolVersion is where a request of the stateless era declares
	// its protocol version (SEP-2575; spec 2026-07-28, basic/versioning,
	// "Protocol Version Negotiation").
	MetaProtocolVersion = "io.modelcontextprotocol/protocolVersion"
	// MetaClientInfo holds a 2026-07-28 request's clientInfo, which
	// initialize carried before.
	MetaClientInfo = "io.modelcontextprotocol/clientInfo"
	// MetaClientCapabilities holds a 2026-07-28 request's client
	// capabilities, which declare the tasks extension (TasksExtension)
	// under "extensions".
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	TasksExtension         = "io.modelcontextprotocol/tasks"
	// MetaSubscriptionID ties a notification to the subscriptions/listen
	// request whose id it holds (2026-07-28, basic/patterns/subscriptions).
	MetaSubscriptionID = "io.modelcontextprotocol/subscriptionId"
	// MetaRelatedTask ties a message to a task (2025-11-25).
	MetaRelatedTask = "io.modelcontextprotocol/related-task"
)

// MaxKeyLength bounds a client key, as the IETF Idempotency-Key draft
// suggests servers do.
const MaxKeyLength = 255
