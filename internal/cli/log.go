package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"
)

// newLogger returns the logger that --log-level and --log-format ask for,
// writing to w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: boundAttr}
	// Case-blind, as --log-level is (slog reads "DEBUG" as "debug").
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format: %q is not one of text, json", format)
}

// maxLogValue bounds a string or an error's text in a log line, in bytes.
// A client names its request ids and tools as it likes: a megabyte of id
// would otherwise be a megabyte of log, on every line about its call.
const maxLogValue = 4 << 10

// boundAttr cuts a string or an error's text longer than maxLogValue, on
// a character boundary, saying how long it was.
func boundAttr(_ []string, a slog.Attr) slog.Attr {
	var s string
	switch v := a.Value.Any().(type) {
	case string:
		s = v
	case error:
		s = v.Error()
	default:
		return a
	}
	if len(s) <= maxLogValue {
		return a
	}
	cut := maxLogValue
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return slog.String(a.Key, fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s)))
}

// parseSize reads a byte count such as 1048576, 512KiB or 16MiB.

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex // protects w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
