package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// npmPlatforms maps GOOS/GOARCH to the npm platform packages build.sh makes.
var npmPlatforms = map[string]string{
	"linux/amd64":   "linux-x64",
	"linux/arm64":   "linux-arm64",
	"darwin/amd64":  "darwin-x64",
	"darwin/arm64":  "darwin-arm64",
	"windows/amd64": "win32-x64",
}

// TestNpmPackage: the npm packages that npm/build.sh packs, installed
// into a fresh project from the files, run `npx mcp-idempotent -- node
// charge-server.mjs` for the TypeScript client, and a retried call is a
// replay. Installed without this platform's package, the launcher says
// which package is missing.
func TestNpmPackage(t *testing.T) {
	node, client := nodePeer(t, "npx-client.mjs")
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm not found in PATH, though node is: %v", err)
	}
	platform, ok := npmPlatforms[runtime.GOOS+"/"+runtime.GOARCH]
	if !ok {
		t.Skipf("npm/build.sh builds no package for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	const version = "0.0.0-test"
	dist := t.TempDir()
	// The cross-compile may take minutes where the cache is cold.
	buildCtx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(buildCtx, "bash", filepath.Join(moduleRoot, "npm", "build.sh"), "-o", dist, version, platform)
	build.Env = append(os.Environ(), "GOFLAGS=") // Go's build cache, not -trimpath's rebuild
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	launcher := filepath.Join(dist, "mcp-idempotent-"+version+".tgz")
	binary := filepath.Join(dist, "mcp-idempotent-"+platform+"-"+version+".tgz")

	install := func(tarballs ...string) string {
		t.Helper()
		ctx := testContext(t)
		project := t.TempDir()
		if err := os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"private": true}`), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, npm, append([]string{"install", "--offline", "--no-audit", "--no-fund", "--loglevel=error"}, tarballs...)...)
		cmd.Dir = project
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return project
	}

	t.Run("replay", func(t *testing.T) {
		project := install(launcher, binary)
		cmd := exec.CommandContext(testContext(t), node, client, project)
		var stdout bytes.Buffer
		stderr := new(syncBuffer)
		cmd.Stdout, cmd.Stderr = &stdout, stderr
		cmd.WaitDelay = 2 * time.Second
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\nstderr:\n%s", cmd, err, stderr.tail(transcriptTail))
		}
		var out struct {
			First, Retry *mcp.CallToolResult
			Charges      int
		}
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatalf("npx-client.mjs printed %q: %v", stdout.String(), err)
		}
		if text(out.First) != "charge #1" || out.First.Meta["mcp-idempotent/replayed"] != nil {
			t.Errorf("first call got %q, _meta %v; want charge #1, not a replay", text(out.First), out.First.Meta)
		}
		if text(out.Retry) != "charge #1" || out.Retry.Meta["mcp-idempotent/replayed"] != true {
			t.Errorf("the retry got %q, _meta %v; want the first charge replayed", text(out.Retry), out.Retry.Meta)
		}
		if out.Charges != 1 {
			t.Errorf("the server charged %d times; want once", out.Charges)
		}
	})

	t.Run("no binary", func(t *testing.T) {
		project := install(launcher) // offline: the platform package cannot come
		cmd := exec.CommandContext(testContext(t), npm, "exec", "--no", "--", "mcp-idempotent", "version")
		cmd.Dir = project
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "@mcp-idempotent/"+platform+", the package that holds the binary for this platform, is not installed") {
			t.Errorf("npx mcp-idempotent with no binary: %v\n%s\nwant a failure naming @mcp-idempotent/%s", err, out, platform)
		}
	})
}

// text is the first text content of r, or "".
func text(r *mcp.CallToolResult) string {
	if r == nil || len(r.Content) == 0 {
		return ""
	}
	if c, ok := r.Content[0].(*mcp.TextContent); ok {
		return c.Text
	}
	return ""
}

// TestNpmBuildChecksPlatformsFirst: npm/build.sh refuses an unknown
// PLATFORM before it builds any, so a typo at the end of the list costs
// no build and leaves no package behind. A PLATFORM is one word of the
// list exactly: two given as one quoted argument, or a part of one, is
// unknown too.
func TestNpmBuildChecksPlatformsFirst(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skipf("bash not found in PATH: %v", err)
	}
	platform, ok := npmPlatforms[runtime.GOOS+"/"+runtime.GOARCH]
	if !ok {
		platform = "linux-x64"
	}
	for _, bad := range []string{"linux-amd64", "linux-x64 linux-arm64", "x64", ""} {
		dist := filepath.Join(t.TempDir(), "dist")
		cmd := exec.CommandContext(testContext(t), bash, filepath.Join(moduleRoot, "npm", "build.sh"), "-o", dist, "0.0.0-test", platform, bad)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "unknown PLATFORM "+bad+";") {
			t.Fatalf("%q: %v\n%s\nwant exit status 2 naming the unknown PLATFORM %q", cmd.Args, err, out, bad)
		}
		if strings.Contains(string(out), "building") {
			t.Errorf("%q built a package before refusing the unknown PLATFORM:\n%s", cmd.Args, out)
		}
		if entries, err := os.ReadDir(dist); err == nil && len(entries) > 0 {
			t.Errorf("%q left %d files in %s; want none", cmd.Args, len(entries), dist)
		}
	}
}
