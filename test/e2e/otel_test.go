package e2e

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// An otlpReceiver is an OTLP trace endpoint in the test's process: it
// decodes every export it gets and keeps the spans.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer

	mu       sync.Mutex
	spans    []*tracepb.Span
	services map[string]bool // the service.name of each export's resource
	got      chan struct{}   // signalled on each export
}

func newReceiver() *otlpReceiver {
	return &otlpReceiver{services: make(map[string]bool), got: make(chan struct{}, 1)}
}

func (r *otlpReceiver) take(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				r.services[anyValue(kv.Value)] = true
			}
		}
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	select {
	case r.got <- struct{}{}:
	default:
	}
}

// Export implements the OTLP/gRPC trace service.
func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.take(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serveHTTP is the OTLP/HTTP endpoint, protobuf encoded.
func (r *otlpReceiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var export coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &export)
	}
	if req.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, fmt.Sprintf("not an OTLP trace export to /v1/traces: %s %v", req.URL.Path, err), http.StatusBadRequest)
		return
	}
	r.take(&export)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// waitFor waits until the receiver holds spans that ok accepts, and
// returns them all.
func (r *otlpReceiver) waitFor(t *testing.T, ok func([]*tracepb.Span) bool) []*tracepb.Span {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		spans := append([]*tracepb.Span(nil), r.spans...)
		r.mu.Unlock()
		if ok(spans) {
			return spans
		}
		select {
		case <-r.got:
		case <-deadline:
			t.Fatalf("the receiver did not get the spans; it got:\n%s", describeSpans(spans))
		}
	}
}

// startReceiver starts an OTLP receiver on protocol (http/protobuf or
// grpc) and returns the environment that points the proxy at it.
func startReceiver(t *testing.T, protocol string) (*otlpReceiver, []string) {
	t.Helper()
	r := newReceiver()
	var endpoint string
	switch protocol {
	case "http/protobuf":
		ts := httptest.NewServer(http.HandlerFunc(r.serveHTTP))
		t.Cleanup(ts.Close)
		endpoint = ts.URL
	case "grpc":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(srv, r)
		go srv.Serve(ln)
		t.Cleanup(srv.Stop)
		endpoint = "http://" + ln.Addr().String()
	}
	return r, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
		"OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_SERVICE_NAME=mcpi-e2e-proxy",
	}
}

// echo is the structured result of the charge server's echo_meta.
type echo struct {
	Meta        map[string]any `json:"meta"`
	N           int            `json:"n"`
	Traceparent string         `json:"traceparent"`
}

// The client's own trace: the proxy's spans must join it.
const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

// TestTracesJoinTheClientsTrace: with an OTLP endpoint in the
// environment, over each OTLP protocol, every tools/call is a span of the
// client's trace (its parent named in params._meta), with the decision,
// the execution and its attempts, a replay's too; the store's operations
// and the send upstream are its children; and the upstream gets the
// send's span as its parent, so the trace runs on into the server.
func TestTracesJoinTheClientsTrace(t *testing.T) {
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			needProxy(t)
			r, env := startReceiver(t, protocol)
			cmd := proxied(t, chargeServer()...)
			cmd.Env = append(cmd.Env, env...)
			ctx := testContext(t)
			p := connect(t, ctx, cmd)

			var echoes []echo
			for range 2 {
				res, err := p.CallTool(ctx, &mcp.CallToolParams{
					Name:      "echo_meta",
					Arguments: map[string]any{"tag": "traced"},
					Meta:      mcp.Meta{"traceparent": traceparent, "tracestate": "vendor=1"},
				})
				if err != nil || res.IsError {
					t.Fatalf("echo_meta: %v %v", err, res)
				}
				echoes = append(echoes, structured[echo](t, res))
			}
			if echoes[1].N != 1 {
				t.Fatalf("echo_meta ran %d times; want once, the second call replayed", echoes[1].N)
			}
			upParent := checkUpstreamParent(t, echoes[0].Meta["traceparent"])
			if got := echoes[0].Meta["tracestate"]; got != "vendor=1" {
				t.Errorf("the upstream got tracestate %v; want the client's, vendor=1", got)
			}
			p.Close() // the proxy exits, and flushes its spans

			spans := r.waitFor(t, func(s []*tracepb.Span) bool {
				return len(named(s, "tools/call echo_meta", tracepb.Span_SPAN_KIND_SERVER)) == 2
			})
			calls := named(spans, "tools/call echo_meta", tracepb.Span_SPAN_KIND_SERVER)
			for i, want := range []string{"new", "replayed"} {
				c := calls[i]
				if hex.EncodeToString(c.TraceId) != clientTrace || hex.EncodeToString(c.ParentSpanId) != clientSpan {
					t.Errorf("call %d: trace %x, parent %x; want the client's, %s and %s", i, c.TraceId, c.ParentSpanId, clientTrace, clientSpan)
				}
				if got := attr(c, "mcp_idempotent.decision"); got != want {
					t.Errorf("call %d: decision %q; want %q", i, got, want)
				}
				if got := attr(c, "gen_ai.tool.name"); got != "echo_meta" {
					t.Errorf("call %d: gen_ai.tool.name %q; want echo_meta", i, got)
				}
				// The replay sends nothing, and still names the sends
				// of the execution it got.
				if got := attr(c, "mcp_idempotent.attempts"); got != "1" {
					t.Errorf("call %d: mcp_idempotent.attempts %q; want 1", i, got)
				}
			}
			if a, b := attr(calls[0], "mcp_idempotent.execution.id"), attr(calls[1], "mcp_idempotent.execution.id"); a == "" || a != b {
				t.Errorf("the calls name executions %q and %q; want one", a, b)
			}
			if got := attr(calls[0], "mcp_idempotent.state"); got != "delivered" && got != "completed" {
				t.Errorf("the first call ends in state %q; want completed or delivered", got)
			}
			sends := named(spans, "tools/call echo_meta", tracepb.Span_SPAN_KIND_CLIENT)
			if len(sends) != 1 {
				t.Fatalf("%d sends upstream traced; want 1:\n%s", len(sends), describeSpans(spans))
			}
			if string(sends[0].ParentSpanId) != string(calls[0].SpanId) || hex.EncodeToString(sends[0].SpanId) != upParent {
				t.Errorf("the send is span %x under %x; want the span the upstream got as its parent (%s), under the first call's (%x)",
					sends[0].SpanId, sends[0].ParentSpanId, upParent, calls[0].SpanId)
			}
			reserves := named(spans, "store reserve", tracepb.Span_SPAN_KIND_INTERNAL)
			if len(reserves) != 2 || string(reserves[0].ParentSpanId) != string(calls[0].SpanId) {
				t.Errorf("store reserve spans: %d; want 2, the first under the first call's span:\n%s", len(reserves), describeSpans(spans))
			}
			r.mu.Lock()
			if !r.services["mcpi-e2e-proxy"] {
				t.Errorf("the spans came from services %v; want mcpi-e2e-proxy, as OTEL_SERVICE_NAME says", r.services)
			}
			r.mu.Unlock()
		})
	}
}

// TestTracesFromHTTPHeaders: in front of HTTP, a client that sends its
// trace context as the traceparent header (not in _meta) is the parent of
// the call's span, and an HTTP upstream gets the proxy's send as its
// parent both in _meta and in the header.
func TestTracesFromHTTPHeaders(t *testing.T) {
	r, env := startReceiver(t, "http/protobuf")
	s := startServeEnv(t, env, "--upstream", httpChargeServer(t))
	ctx := testContext(t)
	hc := httpClient(t)
	hc.Transport = headerTransport{next: hc.Transport, name: "traceparent", value: traceparent}
	p := connectHTTP(t, ctx, s, s.url, "", nil, hc)
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "echo_meta", Arguments: map[string]any{"tag": "header"}})
	if err != nil || res.IsError {
		t.Fatalf("echo_meta: %v %v", err, res)
	}
	got := structured[echo](t, res)
	upParent := checkUpstreamParent(t, got.Meta["traceparent"])
	if want := "00-" + clientTrace + "-" + upParent + "-01"; got.Traceparent != want {
		t.Errorf("the upstream's traceparent header is %q; want %q, as in its _meta", got.Traceparent, want)
	}
	// The call's span ends after its send's, and may come in a later
	// export.
	spans := r.waitFor(t, func(s []*tracepb.Span) bool {
		return len(named(s, "tools/call echo_meta", tracepb.Span_SPAN_KIND_CLIENT)) == 1 &&
			len(named(s, "tools/call echo_meta", tracepb.Span_SPAN_KIND_SERVER)) == 1
	})
	calls := named(spans, "tools/call echo_meta", tracepb.Span_SPAN_KIND_SERVER)
	if len(calls) != 1 || hex.EncodeToString(calls[0].ParentSpanId) != clientSpan {
		t.Fatalf("call spans: %s; want one under the header's parent %s", describeSpans(calls), clientSpan)
	}
	if attr(calls[0], "mcp.session.id") == "" {
		t.Errorf("the call's span names no mcp.session.id")
	}
}

// TestNoTracesWithoutAnExporter: with no OTEL_* variable the proxy
// exports nothing and passes the client's trace context upstream as it
// came.
func TestNoTracesWithoutAnExporter(t *testing.T) {
	needProxy(t)
	r := newReceiver()
	ts := httptest.NewServer(http.HandlerFunc(r.serveHTTP))
	t.Cleanup(ts.Close)
	cmd := proxied(t, chargeServer()...)
	// Only the endpoint's protocol: no endpoint, so no exporter.
	cmd.Env = append(cmd.Env, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_TRACES_EXPORTER=")
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OTEL_EXPORTER_OTLP_ENDPOINT=") {
			t.Skip("the environment names an OTLP endpoint")
		}
	}
	ctx := testContext(t)
	p := connect(t, ctx, cmd)
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "echo_meta", Arguments: map[string]any{"tag": "untraced"},
		Meta: mcp.Meta{"traceparent": traceparent}})
	if err != nil || res.IsError {
		t.Fatalf("echo_meta: %v %v", err, res)
	}
	if got := structured[echo](t, res).Meta["traceparent"]; got != traceparent {
		t.Errorf("the upstream got traceparent %v; want the client's, %s", got, traceparent)
	}
}

// checkUpstreamParent checks the traceparent the upstream got: in the
// client's trace, under a span of the proxy's. It returns that span's id.
func checkUpstreamParent(t *testing.T, got any) string {
	t.Helper()
	s, _ := got.(string)
	parts := strings.Split(s, "-")
	if len(parts) != 4 || parts[1] != clientTrace || parts[2] == clientSpan {
		t.Fatalf("the upstream got traceparent %v; want one in the client's trace %s, under a span of the proxy's", got, clientTrace)
	}
	return parts[2]
}

// headerTransport adds a header to every request.
type headerTransport struct {
	next        http.RoundTripper
	name, value string
}

func (h headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(h.name, h.value)
	return h.next.RoundTrip(req)
}

// structured decodes a result's structured content.
func structured[T any](t *testing.T, res *mcp.CallToolResult) T {
	t.Helper()
	var v T
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return v
}

// named returns the spans called name of kind, oldest first.
func named(spans []*tracepb.Span, name string, kind tracepb.Span_SpanKind) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if s.Name == name && s.Kind == kind {
			out = append(out, s)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].StartTimeUnixNano < out[j-1].StartTimeUnixNano; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// attr returns the string form of a span's attribute, or "".
func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return anyValue(kv.Value)
		}
	}
	return ""
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	}
	return v.String()
}

func describeSpans(spans []*tracepb.Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s (%s) span %x parent %x trace %x\n", s.Name, s.Kind, s.SpanId, s.ParentSpanId, s.TraceId)
	}
	return b.String()
}
