package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestFromMeta(t *testing.T) {
	for _, tt := range []struct {
		meta string
		want Carrier
	}{
		{`{"traceparent":"` + parent + `","tracestate":"a=1"}`, Carrier{parent, "a=1"}},
		{`{"traceparent":"` + parent + `"}`, Carrier{Parent: parent}},
		{`{"traceparent":7,"tracestate":"a=1"}`, Carrier{State: "a=1"}},
		{`{"other":"x"}`, Carrier{}},
		{``, Carrier{}},
	} {
		var meta json.RawMessage
		if tt.meta != "" {
			meta = json.RawMessage(tt.meta)
		}
		if got := FromMeta(meta); got != tt.want {
			t.Errorf("FromMeta(%s) = %+v; want %+v", tt.meta, got, tt.want)
		}
	}
}

// TestExtractAndInject: a span started under the context a carrier
// names is in the carrier's trace, and what carries it upstream, put in
// a _meta, reads back as its own.
func TestExtractAndInject(t *testing.T) {
	ctx := Carrier{Parent: parent, State: "vendor=1"}.Extract(context.Background())
	remote := trace.SpanContextFromContext(ctx)
	if !remote.IsValid() || remote.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !remote.IsRemote() {
		t.Fatalf("extracted %+v; want the remote parent %s", remote, parent)
	}
	out := Inject(ctx)
	if out.Parent != parent || out.State != "vendor=1" {
		t.Fatalf("Inject = %+v; want the same fields back", out)
	}
	params := json.RawMessage(`{"name":"t","_meta":{"traceparent":"00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01","k":1}}`)
	meta := jsonrpc.Member(params, "_meta")
	got := jsonrpc.InsertMeta(params, meta, false, out.MetaMembers())
	if back := FromMeta(jsonrpc.Member(got, "_meta")); back != out {
		t.Errorf("%s reads back as %+v; want %+v", got, back, out)
	}
	if strings.Count(string(got), "traceparent") != 1 || !strings.Contains(string(got), `"k":1`) {
		t.Errorf("%s: want one traceparent, the proxy's, and the other members kept", got)
	}
}

// TestBadParentsAreNone: a traceparent that is not one starts a new
// trace, never an error or a span in a made-up trace.
func TestBadParentsAreNone(t *testing.T) {
	for _, p := range []string{"", "00-zz-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", strings.Repeat("0", 300)} {
		ctx := Carrier{Parent: p}.Extract(context.Background())
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			t.Errorf("traceparent %q gave the parent %+v; want none", p, sc)
		}
	}
	if m := (Carrier{}).MetaMembers(); m != nil {
		t.Errorf("an empty carrier gives members %s; want none", m)
	}
}

// TestSetup: tracing is off without an exporter in the environment, and
// an exporter or protocol the proxy cannot use is an error that names its
// variable, not a silent lack of traces.
func TestSetup(t *testing.T) {
	for _, tt := range []struct {
		name    string
		env     map[string]string
		on      bool
		wantErr string
	}{
		{"nothing set", nil, false, ""},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, true, ""},
		{"a traces endpoint over grpc", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, ""},
		{"otlp named", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false, ""},
		// The specification reads enum values in any case.
		{"OTLP in capitals", map[string]string{"OTEL_TRACES_EXPORTER": "OTLP"}, true, ""},
		{"None in capitals", map[string]string{"OTEL_TRACES_EXPORTER": "None", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false, ""},
		{"GRPC in capitals", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "GRPC"}, true, ""},
		{"HTTP/Protobuf in capitals", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "HTTP/Protobuf"}, true, ""},
		{"disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false, ""},
		{"zipkin", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER=zipkin"},
		{"an endpoint that is no URL", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "::bad"}, false, "OTEL_EXPORTER_OTLP_ENDPOINT=::bad"},
		{"an endpoint without a scheme", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "localhost:4318"}, false, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=localhost:4318"},
		{"a grpc endpoint without a scheme", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "OTEL_EXPORTER_OTLP_ENDPOINT=collector:4317"},
		{"http/json", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, false, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json"},
		// A blank traces protocol is unset: the general one counts.
		{"a blank traces protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": " ", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"},
		// Off, the proxy reads nothing else: the upstream inherits the
		// environment, and may take what the proxy cannot.
		{"http/json, off", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, ""},
		{"http/json, none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, ""},
		{"http/json, disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
				t.Setenv(k, tt.env[k])
			}
			tracer, shutdown, err := Setup(context.Background(), "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Setup: %v; want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (tracer != nil) != tt.on {
				t.Errorf("tracing on: %v; want %v", tracer != nil, tt.on)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // nothing to flush, and nowhere to flush it
			_ = shutdown(ctx)
		})
	}
}

// TestRefusedEndpointHidesPassword: an endpoint refused at start is
// named in the error without the password it holds, whether it parses
// as a URL or not.
func TestRefusedEndpointHidesPassword(t *testing.T) {
	for _, endpoint := range []string{
		"ftp://user:s3cret@collector:4318",
		"http://user:s3cret@coll ector:4318",
		"http://user:s3cret@collector:43x18",
		"user:s3cret@collector:4318",
		"https://user:s3cret@",
	} {
		t.Setenv("OTEL_SDK_DISABLED", "")
		t.Setenv("OTEL_TRACES_EXPORTER", "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
		_, _, err := Setup(context.Background(), "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_ENDPOINT=") || !strings.Contains(err.Error(), "***@") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Setup with the endpoint %q: %v; want it refused, the part before @ shown as ***", endpoint, err)
		}
	}
}

// TestErrorStatusHasNoMessage: a JSON-RPC error's message may quote the
// call's arguments, so neither the call's span nor a send's carries it:
// the status says the code alone. Nor does a malformed answer's status
// carry its first bytes, which may be the tool's result.
func TestErrorStatusHasNoMessage(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	const secret = "4111111111111111"
	_, call := tracer.Start(context.Background(), "call")
	AnswerError(call, json.RawMessage(`{"code":-32602,"message":"invalid card `+secret+`"}`))
	call.End()
	_, send := tracer.Start(context.Background(), "send")
	EndSend(send, fmt.Errorf("sending: %w", &jsonrpc.Error{Code: -32602, Message: "invalid card " + secret}))
	_, lost := tracer.Start(context.Background(), "lost")
	EndSend(lost, errors.New("the upstream exited before answering"))
	_, malformed := tracer.Start(context.Background(), "malformed")
	answer := []byte(`{"jsonrpc":"2.0","id":2,"result":{"card":"` + secret + `"},"error":{"code":1}}`)
	EndSend(malformed, retry.Malformed("a response to tools/call with both a result and an error", answer))
	spans := rec.Ended()
	for i, want := range []string{"JSON-RPC error -32602", "JSON-RPC error -32602", "the upstream exited before answering",
		fmt.Sprintf("malformed answer from the upstream: a response to tools/call with both a result and an error (%d bytes)", len(answer))} {
		if st := spans[i].Status(); st.Code != codes.Error || st.Description != want {
			t.Errorf("span %s: status %v %q; want Error %q", spans[i].Name(), st.Code, st.Description, want)
		}
	}
}

// A client may call a tool by a name of any length, under an id of any
// length: a span carries at most MaxToolName bytes of each, cut on a
// character's boundary.
func TestLongToolNameIsCut(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	long := "é" + strings.Repeat("A", 1<<20)
	ctx, call := StartCall(context.Background(), tracer, Carrier{}, long, json.RawMessage(`"`+long+`"`), "")
	_, send := StartSend(ctx, tracer, long, 1)
	EndSend(send, nil)
	_, ask := StartElicitation(ctx, tracer, long)
	ask.End()
	call.End()
	_, short := StartCall(context.Background(), tracer, Carrier{}, "charge_card", json.RawMessage(`2`), "")
	short.End()
	want := "é" + strings.Repeat("A", MaxToolName-2) + "…"
	for _, s := range rec.Ended()[:3] {
		var tool string
		for _, a := range s.Attributes() {
			if a.Key == ToolName {
				tool = a.Value.AsString()
			}
		}
		if tool != want {
			t.Errorf("span %.40s: gen_ai.tool.name of %d bytes; want %d", s.Name(), len(tool), len(want))
		}
		for _, a := range s.Attributes() {
			if a.Key == RequestID && a.Value.AsString() != want {
				t.Errorf("span %.40s: jsonrpc.request.id of %d bytes; want %d", s.Name(), len(a.Value.AsString()), len(want))
			}
		}
		if len(s.Name()) > MaxToolName+len("elicitation/create ")+len("…") {
			t.Errorf("span name of %d bytes: the tool name was not cut", len(s.Name()))
		}
	}
	if got := rec.Ended()[3].Name(); got != "tools/call charge_card" {
		t.Errorf("span %q; want tools/call charge_card", got)
	}
}

// A variable the OpenTelemetry SDK cannot read is reported in the
// proxy's log, in its format, not on stderr in the SDK's own; its
// chatter is not.
func TestSetupReportsInTheLog(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "abc")
	t.Setenv("OTEL_TRACES_SAMPLER", "bogus")
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, shutdown, err := Setup(context.Background(), "test", log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = shutdown(ctx)
	got := buf.String()
	for _, want := range []string{"bogus", "abc"} {
		if !strings.Contains(got, want) {
			t.Errorf("the log lacks the SDK's complaint about %q:\n%s", want, got)
		}
	}
	// Its info and debug lines stay out, even at debug.
	if strings.Contains(got, "TracerProvider created") {
		t.Errorf("the log holds the SDK's debug lines:\n%s", got)
	}
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		if line != "" && !json.Valid([]byte(line)) {
			t.Errorf("a log line that is not JSON: %s", line)
		}
	}
}

// A number the SDK cannot read, which it passes over at its info level,
// is reported in the proxy's log too.
func TestSetupReportsUnreadNumbers(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_BSP_EXPORT_TIMEOUT", "1s")
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4096")
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, shutdown, err := Setup(context.Background(), "test", log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = shutdown(ctx)
	got := buf.String()
	if !strings.Contains(got, "OTEL_BSP_EXPORT_TIMEOUT=1s") {
		t.Errorf("the log lacks the unread OTEL_BSP_EXPORT_TIMEOUT:\n%s", got)
	}
	if strings.Contains(got, "OTEL_BSP_MAX_QUEUE_SIZE") {
		t.Errorf("the log names a number that reads:\n%s", got)
	}
}

// A header of OTEL_EXPORTER_OTLP_HEADERS the exporter cannot read is
// reported naming the variable, never quoting the header: it is most
// often a credential.
func TestSetupHidesUnreadHeaders(t *testing.T) {
	for _, tt := range []struct{ variable, value string }{
		{"OTEL_EXPORTER_OTLP_HEADERS", "Authorization: Bearer sk-SECRET"},        // HTTP's form, no '='
		{"OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer sk-SECRET%zz"},      // a bad escape
		{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=sk-SECRET%zz,x=1"},        // the traces one
		{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "Authorization: Bearer sk-SECRET"}, // likewise
		// HTTP's form again, but with a base64 value's padding: the
		// exporter cuts at that '=' and finds the name not a token.
		{"OTEL_EXPORTER_OTLP_HEADERS", "Authorization: Basic SECRETdXNlcjpwYXNz=="},
	} {
		t.Run(tt.variable+"="+tt.value, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv(tt.variable, tt.value)
			var buf strings.Builder
			log := slog.New(slog.NewJSONHandler(&buf, nil))
			_, shutdown, err := Setup(context.Background(), "test", log)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = shutdown(ctx)
			got := buf.String()
			if strings.Contains(got, "SECRET") {
				t.Errorf("the log quotes the header:\n%s", got)
			}
			if !strings.Contains(got, `"variable":"`+tt.variable+`"`) {
				t.Errorf("the log does not name %s:\n%s", tt.variable, got)
			}
		})
	}
}
