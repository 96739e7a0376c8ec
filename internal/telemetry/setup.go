// Package telemetry traces the proxy's work with OpenTelemetry when the
// environment configures an exporter (the standard OTEL_* variables), and
// carries W3C trace context through the proxy: from a call's
// params._meta, or its HTTP request's traceparent header, to the span of
// the call, and from there upstream, so that a trace runs from the client
// through the proxy to the server.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of the proxy's spans.
const Name = "github.com/mcp-idempotent/mcp-idempotent"

// Setup returns the tracer the proxy's spans come from, and the function
// that flushes and stops it, which a clean stop calls. Tracing is on when
// OTEL_TRACES_EXPORTER is otlp, or unset while an OTLP endpoint is
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
// off, with a nil tracer, otherwise, and always with OTEL_SDK_DISABLED=true.
// Off, no other variable is read, nor refused: the upstream inherits the
// environment, and a value set for it (OTEL_EXPORTER_OTLP_PROTOCOL=http/json
// for a Node server) must not stop a proxy that exports nothing.
// The protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (the default) or grpc. The
// exporter reads the rest of its OTEL_EXPORTER_OTLP_* variables itself
// (headers, timeout, TLS, compression), the sampler and the batching
// theirs (OTEL_TRACES_SAMPLER, OTEL_BSP_*), and the resource
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
//
// Export failures are logged to log at warn, never to the client, at
// most one line a minute (exportLog).
func Setup(ctx context.Context, version string, log *slog.Logger) (trace.Tracer, func(context.Context) error, error) {
	// Set first: building the exporter and the provider reports a
	// variable it cannot read (OTEL_EXPORTER_OTLP_TIMEOUT=abc,
	// OTEL_TRACES_SAMPLER=bogus), which otherwise goes to stderr in the
	// standard library's format, a line no --log-format json reader takes.
	otel.SetLogger(logr.FromSlogHandler(sdkHandler{log.Handler()}))
	errs := &exportLog{log: log}
	otel.SetErrorHandler(errs)
	exp, err := exporter(ctx)
	if exp == nil || err != nil {
		return nil, func(context.Context) error { return nil }, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "mcp-idempotent"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	warnUnreadNumbers(log)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, batchOptions(log)...), sdktrace.WithResource(res))
	stop := func(ctx context.Context) error {
		err := tp.Shutdown(ctx)
		errs.flush()
		if err != nil && ctx.Err() != nil {
			// Alone, "context deadline exceeded" says nothing of what
			// was lost, or why the stop took that long.
			return fmt.Errorf("the collector did not take the last spans in time, and they are lost: %w", err)
		}
		return err
	}
	return tp.Tracer(Name, trace.WithInstrumentationVersion(version)), stop, nil
}

// sdkNumbers are the whole-number variables the SDK's batching and span
// limits read: the delay and timeout in milliseconds.
var sdkNumbers = []string{
	"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
	"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT",
	"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
	"OTEL_SPAN_EVENT_COUNT_LIMIT", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT",
	"OTEL_SPAN_LINK_COUNT_LIMIT", "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
}

// warnUnreadNumbers logs each of sdkNumbers set to what is not a whole
// number, as OTEL_BSP_EXPORT_TIMEOUT=1s. The SDK uses its default then,
// and says so only at its info level, which the log drops with the rest
// of its chatter (sdkHandler).
func warnUnreadNumbers(log *slog.Logger) {
	for _, name := range sdkNumbers {
		v := os.Getenv(name)
		if _, err := strconv.Atoi(v); v != "" && err != nil {
			log.Warn("tracing", "err", fmt.Sprintf("%s=%s is not a whole number (of milliseconds, for a delay or timeout); the default is used", name, v))
		}
	}
}

// batchOptions returns the batching options that put the SDK's defaults
// in place of an OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_QUEUE_SIZE or
// OTEL_BSP_MAX_EXPORT_BATCH_SIZE under 1, and logs each such value. The
// SDK takes them as they are: a delay of 0 or less keeps a core busy
// exporting nothing, a negative size panics as the proxy starts.
func batchOptions(log *slog.Logger) []sdktrace.BatchSpanProcessorOption {
	under1 := func(name string) bool {
		n, err := strconv.Atoi(os.Getenv(name))
		if err == nil && n < 1 {
			log.Warn("tracing", "err", fmt.Sprintf("%s=%d is under 1; the default is used", name, n))
			return true
		}
		return false
	}
	var opts []sdktrace.BatchSpanProcessorOption
	if under1("OTEL_BSP_SCHEDULE_DELAY") {
		opts = append(opts, sdktrace.WithBatchTimeout(sdktrace.DefaultScheduleDelay*time.Millisecond))
	}
	// The SDK has cut the batch to the queue, so either may be wrong.
	badQueue, badBatch := under1("OTEL_BSP_MAX_QUEUE_SIZE"), under1("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
	if badQueue {
		opts = append(opts, sdktrace.WithMaxQueueSize(sdktrace.DefaultMaxQueueSize))
	}
	if badQueue || badBatch {
		batch, err := strconv.Atoi(os.Getenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"))
		if err != nil || batch < 1 {
			batch = sdktrace.DefaultMaxExportBatchSize
		}
		queue, err := strconv.Atoi(os.Getenv("OTEL_BSP_MAX_QUEUE_SIZE"))
		if err != nil || queue < 1 {
			queue = sdktrace.DefaultMaxQueueSize
		}
		opts = append(opts, sdktrace.WithMaxExportBatchSize(min(batch, queue)))
	}
	return opts
}

// exporter returns the OTLP exporter the environment asks for, or nil
// when it asks for none.
func exporter(ctx context.Context) (*otlptrace.Exporter, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	// The specification reads enum values in any case: OTLP is otlp.
	switch name := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); strings.ToLower(name) {
	case "none":
		return nil, nil
	case "":
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: mcp-idempotent exports traces with otlp only (or none)", name)
	}
	// A value of white space alone counts as unset, as an empty one does:
	// it does not hide the general protocol.
	variable, protocol := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if protocol == "" {
		variable, protocol = "OTEL_EXPORTER_OTLP_PROTOCOL", strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	if err := checkEndpoints(); err != nil {
		return nil, err
	}
	var exp *otlptrace.Exporter
	var err error
	switch strings.ToLower(protocol) {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%s=%s: the protocols are http/protobuf and grpc", variable, protocol)
	}
	if err != nil {
		return nil, errors.Join(errors.New("starting the OTLP trace exporter"), err)
	}
	return exp, nil
}

// checkEndpoints refuses an OTLP endpoint that is not an http or https
// URL with a host. The exporter would only log such a value, in a line
// of its own format, and send the spans to its default endpoint instead.
func checkEndpoints() error {
	for _, variable := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		v := os.Getenv(variable)
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s=%s: an endpoint is an http:// or https:// URL, such as http://127.0.0.1:4318", variable, hideUserinfo(v))
		}
	}
	return nil
}

// hideUserinfo returns endpoint with what stands before its last @ (a
// user and password), after any scheme, as "***": a password is not for
// the log. Not url.Redacted: the endpoints refused are those that may
// not parse, or parse as something else ("user:pass@host:4318" is the
// scheme "user"), and show the password whole.
func hideUserinfo(endpoint string) string {
	scheme, rest, ok := strings.Cut(endpoint, "://")
	if !ok {
		scheme, rest = "", endpoint
	} else {
		scheme += "://"
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = "***" + rest[i:]
	}
	return scheme + rest
}
