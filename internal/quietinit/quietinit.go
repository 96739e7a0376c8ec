// Package quietinit silences the standard logger while the program's
// packages initialize; main gives it back its output once they have.
//
// go.opentelemetry.io/auto/sdk reads the OTEL_*_LIMIT variables when it
// initializes, before the proxy has parsed a flag, and logs a value it
// cannot read through the default slog handler: a line in neither
// --log-format, printed even with tracing off, when the proxy reads no
// OTEL_* variable (the upstream may). With tracing on, the proxy logs
// such a value itself (internal/telemetry).
//
// Packages initialize in the order of their import paths, each once its
// imports have: this one, which imports only io and log, sorts before
// go.opentelemetry.io/... and so initializes first. main imports it for
// that effect alone.
//
// The price: a package whose init called log.Fatal would end the program
// with status 1 and say nothing. A panic in an init still prints.
package quietinit

import (
	"io"
	"log"
)

func init() { log.SetOutput(io.Discard) }
