package intercept

import (
	"encoding/json"
	"fmt"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// A ToolCall is the decoded params of a tools/call request.
type ToolCall struct {
	// Params is the params member as the caller sent it; it is what goes
	// upstream.
	Params json.RawMessage
	Name   string
	// Arguments is the arguments object, or nil when absent.
	Arguments json.RawMessage
	// Meta is the _meta member, or nil. It is never part of the
	// fingerprint.
	Meta json.RawMessage
	// Task is the task-augmentation member (MCP 2025-11-25 tasks), or nil.
	Task json.RawMessage
	// InputResponses and RequestState continue a multi-round request
	// (MCP 2026-07-28); nil when absent.
	InputResponses json.RawMessage
	RequestState   json.RawMessage
}

// ParseToolCall decodes and validates tools/call params. Its errors are
// JSON-RPC invalid-params errors, ready for the wire.
func ParseToolCall(params json.RawMessage) (*ToolCall, *jsonrpc.Error) {
	if len(params) == 0 || params[0] != '{' {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call: params must be an object with a \"name\"")
	}
	var p struct {
		Name           json.RawMessage `json:"name"`
		Arguments      json.RawMessage `json:"arguments"`
		Task           json.RawMessage `json:"task"`
		InputResponses json.RawMessage `json:"inputResponses"`
		RequestState   json.RawMessage `json:"requestState"`
		Meta           json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call: params are not a valid object: %v", err)
	}
	var name string
	if err := json.Unmarshal(p.Name, &name); err != nil || name == "" {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call: params.name must be a non-empty string")
	}
	args := nullToNil(p.Arguments)
	if args != nil && args[0] != '{' {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: arguments must be an object, got %s", name, kind(args))
	}
	return &ToolCall{
		Params:         params,
		Name:           name,
		Arguments:      args,
		Meta:           nullToNil(p.Meta),
		Task:           nullToNil(p.Task),
		InputResponses: nullToNil(p.InputResponses),
		RequestState:   nullToNil(p.RequestState),
	}, nil
}

func nullToNil(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

func kind(raw json.RawMessage) string {
	switch raw[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	default:
		return fmt.Sprintf("the number %s", raw)
	}
}
