package main

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// TestMain, in the child TestInitLogsNothing starts, only initializes
// the packages and exits.
func TestMain(m *testing.M) {
	if os.Getenv("MCPI_INIT_CHILD") == "1" {
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestInitLogsNothing: a variable a dependency reads as it initializes
// (go.opentelemetry.io/auto/sdk, OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT) puts
// no line on stderr before the proxy has read --log-format, nor with
// tracing off, when the proxy reads no OTEL_* variable.
func TestInitLogsNothing(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "MCPI_INIT_CHILD=1",
		"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT=x", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=y", "OTEL_SPAN_LINK_COUNT_LIMIT=z")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.Bytes())
	}
	if stderr.Len() > 0 {
		t.Errorf("initializing the packages wrote to stderr:\n%s", stderr.Bytes())
	}
}
