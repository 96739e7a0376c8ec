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
// starts and knows its version. It needs a Docker engine, and skips,
// saying so, where there is none (the docker client alone is not enough).
func TestDockerImage(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		skipnote.Skip(t, "Docker image", "no docker command: the image is not built here")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, docker, "info").CombinedOutput(); err != nil {
		skipnote.Skip(t, "Docker image", fmt.Sprintf("no Docker engine answers (docker info: %v): the image is not built here\n%s", err, firstLine(out)))
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
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
