package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

// TestDockerImage builds the Dockerfile and runs the image: the binary
// knows its version, and serves: five identical calls through it charge
// once. It needs a Docker engine, and skips, saying so, where there is
// none (the docker client alone is not enough).
func TestDockerImage(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		skipnote.Skip(t, "Docker image", "no docker command: the image is not built here")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, docker, "info").CombinedOutput(); err != nil {
		skipnote.Skip(t, "Docker image", fmt.Sprintf("no Docker engine answers (docker info: %v: %s): the image is not built here", err, lastLine(out)))
	}
	const tag = "mcp-idempotent:e2e-test"
	build := exec.CommandContext(ctx, docker, "build", "--build-arg", "VERSION=0.0.0-e2e", "-t", tag, moduleRoot)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	t.Cleanup(func() { _ = exec.Command(docker, "rmi", "-f", tag).Run() })
	out, err := exec.CommandContext(ctx, docker, "run", "--rm", tag, "version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "mcp-idempotent 0.0.0-e2e" {
		t.Fatalf("docker run %s version: %v, %q; want mcp-idempotent 0.0.0-e2e", tag, err, out)
	}

	// The image's purpose: serve in front of an HTTP upstream. The host's
	// network lets the container reach the test's upstream on loopback.
	cmd := exec.Command(docker, "run", "--rm", "--network", "host", tag,
		"serve", "--listen", "127.0.0.1:0", "--upstream", httpChargeServer(t))
	s := startServed(t, cmd)
	fiveChargesOneExecution(t, ctx, connectHTTP(t, ctx, s, s.url, "", nil, nil), "4242")
}

// lastLine is the last line of b: the one in which docker says what is
// wrong, after the lines of what it could tell.
func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	return s[strings.LastIndexByte(s, '\n')+1:]
}
