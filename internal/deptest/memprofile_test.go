package deptest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoMemoryProfile checks that the binary does not link the runtime's
// memory profile. The linker then turns off the sampling of allocations,
// which otherwise unwinds a stack every 512 KiB allocated; the test
// binaries keep it, and bench/instructions.sh and bench/footprint.sh turn
// it off (GODEBUG=memprofilerate=0) to count what the binary runs. A
// dependency that links runtime/pprof's heap profile (net/http/pprof, a
// profiler's agent) would make those counts too low.
func TestNoMemoryProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "mcp-idempotent")
	build := exec.Command(goTool, "build", "-o", bin, module+"/cmd/mcp-idempotent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	nm := exec.Command(goTool, "tool", "nm", bin)
	var stderr bytes.Buffer
	nm.Stderr = &stderr
	out, err := nm.Output()
	if err != nil {
		t.Fatalf("go tool nm: %v\n%s", err, stderr.Bytes())
	}
	if !strings.Contains(string(out), " runtime.disableMemoryProfiling\n") {
		t.Fatal("the binary has no runtime.disableMemoryProfiling: the runtime changed, check the counts' GODEBUG=memprofilerate=0")
	}
	for line := range strings.Lines(string(out)) {
		if strings.HasSuffix(line, " runtime.memProfileInternal\n") {
			t.Fatalf("the binary links the memory profile (%s): allocations are sampled, and bench/instructions.sh counts without that", strings.TrimSpace(line))
		}
	}
}
