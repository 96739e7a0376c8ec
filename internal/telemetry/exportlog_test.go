package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A collector that refuses every export gets one log line, not one per
// batch of spans; the stop counts the rest.
func TestExportFailuresLoggedOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now = func() time.Time { return at } // no minute passes
	defer func() { now = time.Now }()
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	tracer, shutdown, err := Setup(context.Background(), "test", log)
	if err != nil {
		t.Fatal(err)
	}
	// Four batches or more: the batcher sends at most 512 spans in one.
	for range 2000 {
		_, span := tracer.Start(context.Background(), "s")
		span.End()
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines; want the first failure and, at the stop, a count of the rest:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0]["err"].(string), "500") {
		t.Errorf("first line %v; want the failure", lines[0])
	}
	if n, _ := lines[1]["unlogged_errors"].(float64); n < 3 {
		t.Errorf("last line %v; want unlogged_errors of 3 or more", lines[1])
	}
}

// Once the minute has passed, the next failure is logged with the count
// of those left out before it.
func TestExportLogCountsWhatItLeftOut(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now = func() time.Time { return at }
	defer func() { now = time.Now }()
	var buf strings.Builder
	l := &exportLog{log: slog.New(slog.NewJSONHandler(&buf, nil))}
	for range 5 {
		l.Handle(context.DeadlineExceeded)
	}
	at = at.Add(exportLogEvery)
	l.Handle(context.Canceled)
	l.flush() // nothing left out since
	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(got) != 2 || strings.Contains(got[0], "unlogged") || !strings.Contains(got[1], `"unlogged_errors":4`) || !strings.Contains(got[1], "canceled") {
		t.Errorf("log:\n%s\nwant the first error, then the one a minute later counting 4 left out", buf.String())
	}
}

// A stop whose time runs out before a collector that never answers
// took the last spans says they are lost, not only that time ran out.
func TestStopSaysSpansAreLost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			go io.Copy(io.Discard, c) // reads, never answers
		}
	}()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	tracer, shutdown, err := Setup(context.Background(), "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tracer.Start(context.Background(), "s")
	span.End()
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	err = shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "lost") {
		t.Errorf("stop = %v; want an error that says the spans are lost", err)
	}
}

// A batching value under 1 is logged and the default used: the SDK
// would panic on a negative size, and spin on a delay of 0.
func TestBatchValuesUnderOne(t *testing.T) {
	for _, tt := range []struct{ name, value string }{
		{"OTEL_BSP_MAX_QUEUE_SIZE", "-5"},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-1"},
		{"OTEL_BSP_MAX_QUEUE_SIZE", "0"},
		{"OTEL_BSP_SCHEDULE_DELAY", "0"},
		{"OTEL_BSP_SCHEDULE_DELAY", "-1"},
	} {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv(tt.name, tt.value)
			var buf strings.Builder
			tracer, shutdown, err := Setup(context.Background(), "test", slog.New(slog.NewJSONHandler(&buf, nil)))
			if err != nil {
				t.Fatal(err)
			}
			_, span := tracer.Start(context.Background(), "s")
			span.End()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = shutdown(ctx)
			if want := tt.name + "=" + tt.value + " is under 1"; !strings.Contains(buf.String(), want) {
				t.Errorf("the log lacks %q:\n%s", want, buf.String())
			}
		})
	}
}
