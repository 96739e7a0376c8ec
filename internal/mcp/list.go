package mcp

import (
	"encoding/json"
	"errors"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// Annotations are the tool annotations of MCP's Tool type that bear on
// replay. A nil hint is absent.
type Annotations struct {
	ReadOnlyHint    *bool `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool `json:"openWorldHint,omitempty"`
}

// A Tool is what tools/list says of one tool.
type Tool struct {
	Name        string          `json:"name"`
	Annotations *Annotations    `json:"annotations,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// A ListPage is one page of a tools/list result.
type ListPage struct {
	Tools      []Tool `json:"tools"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// ParseListResult decodes a tools/list result. Member names are matched
// exactly, as MCP peers read them: with encoding/json's case-insensitive
// matching, a tool annotated {"readOnlyHint":false,"ReadOnlyHint":true}
// would pass as read-only, and its calls through unrecorded. A hint that
// is not a boolean is absent.
func ParseListResult(result json.RawMessage) (ListPage, error) {
	var page ListPage
	if !json.Valid(result) {
		return page, errors.New("tools/list result is not JSON")
	}
	obj, ok := object(result)
	if !ok {
		return page, errors.New("tools/list result is not an object")
	}
	var err error
	jsonrpc.EachMember(obj, func(name, value []byte) bool {
		switch string(name) {
		case "tools":
			page.Tools, err = parseTools(value)
		case "nextCursor":
			page.NextCursor, _ = jsonrpc.StringValue(value)
		}
		return err == nil
	})
	return page, err
}

// parseTools reads the tools array of a tools/list result.
func parseTools(value []byte) ([]Tool, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(value, &raws); err != nil {
		return nil, errors.New("tools/list result: tools is not an array")
	}
	tools := make([]Tool, 0, len(raws))
	for _, raw := range raws {
		obj, ok := object(raw)
		if !ok {
			return nil, errors.New("tools/list result: a tool is not an object")
		}
		var t Tool
		jsonrpc.EachMember(obj, func(name, value []byte) bool {
			switch string(name) {
			case "name":
				t.Name, _ = jsonrpc.StringValue(value)
			case "annotations":
				t.Annotations = parseAnnotations(value)
			case "inputSchema":
				t.InputSchema = json.RawMessage(value)
			}
			return true
		})
		tools = append(tools, t)
	}
	return tools, nil
}

// parseAnnotations reads a tool's annotations; nil if they are not an
// object.
func parseAnnotations(value []byte) *Annotations {
	obj, ok := object(value)
	if !ok {
		return nil
	}
	a := &Annotations{}
	jsonrpc.EachMember(obj, func(name, value []byte) bool {
		switch string(name) {
		case "readOnlyHint":
			a.ReadOnlyHint = boolean(value)
		case "destructiveHint":
			a.DestructiveHint = boolean(value)
		case "idempotentHint":
			a.IdempotentHint = boolean(value)
		case "openWorldHint":
			a.OpenWorldHint = boolean(value)
		}
		return true
	})
	return a
}

// Strictest returns the annotations b, with the read-only and idempotent
// hints only where a, another listing's of the same tool (nil for none),
// gives them too: a tool listed twice with different hints is taken at
// the class that records its calls.
func Strictest(a, b *Annotations) *Annotations {
	if a == nil {
		return b
	}
	readOnly := isTrue(a.ReadOnlyHint) && isTrue(b.ReadOnlyHint)
	idempotent := isTrue(a.IdempotentHint) && isTrue(b.IdempotentHint)
	if readOnly == isTrue(b.ReadOnlyHint) && idempotent == isTrue(b.IdempotentHint) {
		return b
	}
	m := *b
	m.ReadOnlyHint, m.IdempotentHint = &readOnly, &idempotent
	return &m
}

func isTrue(b *bool) bool { return b != nil && *b }

// object returns the valid JSON value raw without its leading white
// space, if it is an object.
func object(raw []byte) ([]byte, bool) {
	for len(raw) > 0 && (raw[0] == ' ' || raw[0] == '\t' || raw[0] == '\n' || raw[0] == '\r') {
		raw = raw[1:]
	}
	return raw, len(raw) > 0 && raw[0] == '{'
}

// boolean returns the boolean a raw JSON value holds; nil for any other
// value.
func boolean(raw []byte) *bool {
	var b bool
	switch string(raw) {
	case "true":
		b = true
	case "false":
	default:
		return nil
	}
	return &b
}

// SchemaDefaults returns the defaults that an inputSchema gives its
// top-level properties, as raw JSON by property name; nil when there are
// none or the schema cannot be read. Names are matched exactly, as in
// ParseListResult.
func SchemaDefaults(schema json.RawMessage) map[string]json.RawMessage {
	if !json.Valid(schema) {
		return nil
	}
	props, ok := object(jsonrpc.Member(schema, "properties"))
	if !ok {
		return nil
	}
	var defaults map[string]json.RawMessage
	jsonrpc.EachMember(props, func(prop, schema []byte) bool {
		def := jsonrpc.Member(schema, "default")
		if def == nil {
			return true
		}
		if defaults == nil {
			defaults = make(map[string]json.RawMessage)
		}
		defaults[string(prop)] = json.RawMessage(def)
		return true
	})
	return defaults
}
