package telemetry

import (
	"context"
	"log/slog"
	"os"
	"strings"
)

// sdkHandler passes on the SDK's errors and warnings, and drops its info
// and debug lines (a dump of its configuration, each tracer made): the
// proxy's log at debug has the proxy's lines. The SDK logs a warning at
// logr's V(1), which reaches slog as level -1: it is raised to Warn.
type sdkHandler struct{ slog.Handler }

func (h sdkHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= -1 && h.Handler.Enabled(ctx, max(l, slog.LevelWarn))
}

func (h sdkHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		r.Level = slog.LevelWarn
	}
	if headerLines[r.Message] {
		r = withoutHeaderText(r)
	}
	return h.Handler.Handle(ctx, r)
}

func (h sdkHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return sdkHandler{h.Handler.WithAttrs(as)}
}

func (h sdkHandler) WithGroup(name string) slog.Handler {
	return sdkHandler{h.Handler.WithGroup(name)}
}

// headerLines are the messages of the exporter's lines about a header of
// OTEL_EXPORTER_OTLP_HEADERS it cannot read. They quote the header, and a
// header there is most often a credential (an API key, a bearer token
// written "Authorization: Bearer ..." in HTTP's form), which the log must
// not get.
var headerLines = map[string]bool{"parse headers": true, "escape header value": true}

// headerVariables are the variables the exporter reads headers from.
var headerVariables = []string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"}

// withoutHeaderText returns r without the attributes that quote the
// header (input, value, key), naming instead the variable that holds it.
// The key goes too: the exporter quotes it only when it is no header
// name, as "Authorization: Basic dXNlcjpw" is, cut at a base64 value's
// padding. The exporter leaves such a header out and goes on.
func withoutHeaderText(r slog.Record) slog.Record {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "input" && a.Key != "value" && a.Key != "key" {
			out.AddAttrs(a)
		}
		return true
	})
	var set []string
	for _, name := range headerVariables {
		if os.Getenv(name) != "" {
			set = append(set, name)
		}
	}
	out.AddAttrs(slog.String("variable", strings.Join(set, " or ")))
	return out
}
