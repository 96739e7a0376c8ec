//go:build unix

package e2e

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

// TestNpmLauncherSignal: the npm launcher ends as its binary ended. A
// binary killed by a signal Node can die of kills the launcher with it;
// one killed by SIGPIPE (which Node ignores) or SIGUSR1 (which starts
// Node's inspector) makes the launcher exit 128 plus the signal's number,
// never 0. The binary is a script that kills itself, under the launcher
// as npm lays both out.
func TestNpmLauncherSignal(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		skipnote.Unavailable(t, "npm peer", "node not found in PATH")
	}
	platform, ok := npmPlatforms[runtime.GOOS+"/"+runtime.GOARCH]
	if !ok || runtime.GOOS == "windows" {
		t.Skipf("npm/build.sh builds no unix package for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	modules := filepath.Join(t.TempDir(), "node_modules")
	launcherSrc, err := os.ReadFile(filepath.Join(moduleRoot, "npm", "mcp-idempotent", "bin", "mcp-idempotent.js"))
	if err != nil {
		t.Fatal(err)
	}
	launcher := filepath.Join(modules, "mcp-idempotent", "bin", "mcp-idempotent.js")
	binary := filepath.Join(modules, "@mcp-idempotent", platform, "bin", "mcp-idempotent")
	for path, body := range map[string]string{
		launcher: string(launcherSrc),
		binary:   "#!/bin/sh\nkill -s \"$1\" $$\n",
		filepath.Join(modules, "@mcp-idempotent", platform, "package.json"): `{"name": "@mcp-idempotent/` + platform + `", "version": "0.0.0"}`,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		sig      syscall.Signal
		name     string
		killed   bool // the launcher dies of sig, rather than exiting 128+sig
		exitCode int
	}{
		{sig: syscall.SIGTERM, name: "TERM", killed: true},
		{sig: syscall.SIGHUP, name: "HUP", killed: true},
		{sig: syscall.SIGPIPE, name: "PIPE", exitCode: 128 + int(syscall.SIGPIPE)},
		{sig: syscall.SIGUSR1, name: "USR1", exitCode: 128 + int(syscall.SIGUSR1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(testContext(t), node, launcher, tc.name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the launcher of a binary killed by SIG%s: %v, want it to fail\n%s", tc.name, err, out)
			}
			ws := exit.Sys().(syscall.WaitStatus)
			switch {
			case tc.killed && !(ws.Signaled() && ws.Signal() == tc.sig):
				t.Errorf("the launcher of a binary killed by SIG%s ended %v; want killed by SIG%s\n%s", tc.name, err, tc.name, out)
			case !tc.killed && exit.ExitCode() != tc.exitCode:
				t.Errorf("the launcher of a binary killed by SIG%s ended %v; want exit status %d\n%s", tc.name, err, tc.exitCode, out)
			}
		})
	}
}

// TestNpmLauncherWindowsForwardsNoSignal: on Windows the console sends
// its Ctrl-C to the binary itself, and Node's child.kill would terminate
// the binary rather than signal it. So there the launcher, told SIGINT,
// sends the binary nothing and waits for its exit. Windows is played by
// a preload that sets process.platform; the preload also says on stderr
// when the launcher's SIGINT listener has run, so the test closes the
// binary's stdin only after it.
func TestNpmLauncherWindowsForwardsNoSignal(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		skipnote.Unavailable(t, "npm peer", "node not found in PATH")
	}
	dir := t.TempDir()
	modules := filepath.Join(dir, "node_modules")
	launcherSrc, err := os.ReadFile(filepath.Join(moduleRoot, "npm", "mcp-idempotent", "bin", "mcp-idempotent.js"))
	if err != nil {
		t.Fatal(err)
	}
	launcher := filepath.Join(modules, "mcp-idempotent", "bin", "mcp-idempotent.js")
	preload := filepath.Join(dir, "win32.js")
	for path, body := range map[string]string{
		launcher: string(launcherSrc),
		preload: `Object.defineProperty(process, "platform", {value: "win32"});
Object.defineProperty(process, "arch", {value: "x64"});
const on = process.on.bind(process);
const say = (line) => require("node:fs").writeSync(2, line + "\n");
process.on = (ev, fn) => {
  if (ev !== "SIGINT") return on(ev, fn);
  const r = on(ev, (...a) => { fn(...a); say("handled SIGINT"); });
  say("listening SIGINT");
  return r;
};
`,
		// The binary: says it started, and exits once its stdin closes;
		// a SIGINT makes it say so and exit 130.
		filepath.Join(modules, "@mcp-idempotent", "win32-x64", "bin", "mcp-idempotent.exe"): "#!/bin/sh\ntrap 'echo INT; exit 130' INT\necho started\ncat >/dev/null\necho done\n",
		filepath.Join(modules, "@mcp-idempotent", "win32-x64", "package.json"):              `{"name": "@mcp-idempotent/win32-x64", "version": "0.0.0"}`,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.CommandContext(testContext(t), node, "--require", preload, launcher)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr := bufio.NewReader(stdoutPipe), bufio.NewReader(stderrPipe)
	if line, err := stdout.ReadString('\n'); line != "started\n" {
		t.Fatalf("the binary printed %q (%v); want started", line, err)
	}
	// Sent before the launcher listens, a SIGINT would end Node itself.
	if line, err := stderr.ReadString('\n'); line != "listening SIGINT\n" {
		t.Fatalf("the launcher printed %q (%v) on stderr; want the preload's listening SIGINT", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if line, err := stderr.ReadString('\n'); line != "handled SIGINT\n" {
		t.Fatalf("the launcher printed %q (%v) on stderr; want the preload's handled SIGINT", line, err)
	}
	stdin.Close()
	rest, _ := io.ReadAll(stdout)
	if err := cmd.Wait(); err != nil || string(rest) != "done\n" {
		t.Errorf("told SIGINT as on Windows, the launcher ended %v, the binary printing %q; want the binary left to run to its end (done), and status 0", err, rest)
	}
}
