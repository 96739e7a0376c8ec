package telemetry

import (
	"context"
	"encoding/json"
	"strconv"

	"go.opentelemetry.io/otel/propagation"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// The W3C trace context fields, as MCP carries them in params._meta and
// HTTP in headers.
const (
	Traceparent = "traceparent"
	Tracestate  = "tracestate"
)

// A Carrier holds the two W3C trace context fields of one request.
type Carrier struct {
	Parent, State string
}

// FromMeta returns the trace context fields of meta, a request's
// params._meta object (or nil); a field that is not a string is absent.
func FromMeta(meta json.RawMessage) Carrier {
	if meta == nil {
		return Carrier{}
	}
	return Carrier{Parent: metaString(meta, Traceparent), State: metaString(meta, Tracestate)}
}

func metaString(meta json.RawMessage, name string) string {
	v := jsonrpc.Member(meta, name)
	if len(v) == 0 || v[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// Or returns c when it names a parent, else d: a call's own _meta wins
// over the HTTP request that carried it, which may carry a batch.
func (c Carrier) Or(d Carrier) Carrier {
	if c.Parent != "" {
		return c
	}
	return d
}

// Get, Set and Keys make a Carrier a propagation.TextMapCarrier.
func (c *Carrier) Get(key string) string {
	switch key {
	case Traceparent:
		return c.Parent
	case Tracestate:
		return c.State
	}
	return ""
}

func (c *Carrier) Set(key, value string) {
	switch key {
	case Traceparent:
		c.Parent = value
	case Tracestate:
		c.State = value
	}
}

func (c *Carrier) Keys() []string { return []string{Traceparent, Tracestate} }

// Extract returns ctx with the remote span context that c names, if it
// names a valid one: the parent of the spans started from it.
func (c Carrier) Extract(ctx context.Context) context.Context {
	if c.Parent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, &c)
}

// Inject returns the trace context fields that carry ctx's span upstream.
func Inject(ctx context.Context) Carrier {
	var c Carrier
	propagation.TraceContext{}.Inject(ctx, &c)
	return c
}

// MetaMembers returns c as members of a _meta object (JSON members
// without braces), for jsonrpc.InsertMeta; nil when c names no parent.
func (c Carrier) MetaMembers() []byte {
	if c.Parent == "" {
		return nil
	}
	b := make([]byte, 0, 96+len(c.State))
	b = append(b, `"traceparent":`...)
	b = strconv.AppendQuote(b, c.Parent)
	if c.State != "" {
		b = append(b, `,"tracestate":`...)
		b = strconv.AppendQuote(b, c.State)
	}
	return b
}

// WithoutStaleState returns params, whose _meta is meta (a slice of
// them, or nil), less the client's tracestate when c, the proxy's span
// that goes upstream in its place, has none: a tracestate belongs to the
// traceparent it came with (W3C trace context), and c's span has one of
// the client's only when the client's traceparent is its parent. The new
// _meta is returned too, for jsonrpc.InsertMeta.
func (c Carrier) WithoutStaleState(params, meta json.RawMessage) (json.RawMessage, json.RawMessage) {
	if c.State != "" {
		return params, meta // c's own replaces the client's
	}
	return jsonrpc.WithoutMetaMember(params, meta, Tracestate)
}
