//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The MCP conformance suite (@modelcontextprotocol/conformance, pinned in
// test/npm) run with and without the proxy: whatever it finds of a server
// or a client directly, it must find the same through the proxy. Its peers
// are the Go SDK's own conformance server and client, built from the
// module this repository already requires.

// conformancePeers are the Go SDK's conformance server and client, built
// once for the package.
var conformancePeers struct {
	once           sync.Once
	server, client string
	err            error
}

func conformanceBinaries(t *testing.T) (server, client string) {
	t.Helper()
	p := &conformancePeers
	p.once.Do(func() {
		p.server = filepath.Join(buildDir, "everything-server")
		p.client = filepath.Join(buildDir, "everything-client")
		if p.err = goBuild(p.server, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"); p.err == nil {
			p.err = goBuild(p.client, "github.com/modelcontextprotocol/go-sdk/conformance/everything-client")
		}
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.server, p.client
}

// conformance runs the suite's command line (server or client mode) and
// returns what it found: each check's status by scenario and check id.
func conformance(t *testing.T, ctx context.Context, args ...string) map[string]string {
	t.Helper()
	node, entry := nodePeer(t, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, node, append(append([]string{entry}, args...), "--output-dir", out)...)
	transcript, runErr := cmd.CombinedOutput()
	found, err := conformanceChecks(out)
	if err != nil || len(found) == 0 {
		t.Fatalf("conformance %s found nothing (%v; exit: %v):\n%s", strings.Join(args, " "), err, runErr, transcript)
	}
	return found
}

// stamp is the time the suite adds to each scenario's directory.
var stamp = regexp.MustCompile(`-\d{4}-\d\d-\d\dT[\d-]+Z$`)

// conformanceChecks reads the checks.json files the suite wrote under dir.
func conformanceChecks(dir string) (map[string]string, error) {
	found := make(map[string]string)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "checks.json" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var checks []struct{ ID, Status string }
		if err := json.Unmarshal(b, &checks); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		scenario, _ := filepath.Rel(dir, filepath.Dir(path))
		scenario = stamp.ReplaceAllString(scenario, "")
		for _, c := range checks {
			// INFO entries log the traffic the suite saw, which through
			// the proxy is the proxy's: they are not findings.
			if c.Status != "INFO" {
				found[scenario+": "+c.ID] = c.Status
			}
		}
		return nil
	})
	return found, err
}

// sameFindings fails t unless the suite found through the proxy what it
// found directly, and found that to conform.
func sameFindings(t *testing.T, what string, proxied, direct map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(direct)) {
		if direct[k] != "SUCCESS" {
			t.Errorf("directly, %s: %s; the suite's peers should conform", k, direct[k])
		}
		if got, ok := proxied[k]; !ok {
			t.Errorf("%s: %s is not checked through the proxy (directly: %s)", what, k, direct[k])
		} else if got != direct[k] {
			t.Errorf("%s: %s is %s through the proxy, %s directly", what, k, got, direct[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(proxied)) {
		if _, ok := direct[k]; !ok {
			t.Errorf("%s: %s (%s) is checked through the proxy only", what, k, proxied[k])
		}
	}
}

// startConformanceServer runs the Go SDK's conformance server over
// Streamable HTTP with sessions, as the suite's sampling and elicitation
// scenarios need, and returns its URL.
func startConformanceServer(t *testing.T, server string) string {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(server, "-http", addr, "-stateless=false")
	stderr := new(syncBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("conformance server's stderr:\n%s", stderr)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the conformance server did not listen on %s: %v\n%s", addr, err, stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConformanceServerThroughServe(t *testing.T) {
	t.Parallel()
	server, _ := conformanceBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	url := startConformanceServer(t, server)
	direct := conformance(t, ctx, "server", "--url", url)
	if len(direct) < 30 {
		t.Fatalf("the suite made %d checks directly; want its 30 and more", len(direct))
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"stdio upstream", []string{"--", server}},
		{"HTTP upstream", []string{"--upstream", url}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t, tc.args...)
			sameFindings(t, tc.name, conformance(t, ctx, "server", "--url", s.url), direct)
		})
	}
}

// conformanceClientScenarios are the suite's client scenarios that are
// not about OAuth, which the proxy does not relay (docs/http.md).
var conformanceClientScenarios = []string{"initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry"}

func TestConformanceClientThroughServe(t *testing.T) {
	t.Parallel()
	needProxy(t)
	_, client := conformanceBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The suite starts a server of its own for each scenario and runs
	// the client with its URL as the last argument, in an environment of
	// its own: the wrapper puts serve in front of that server and gives
	// the client serve's URL instead.
	wrapper := filepath.Join(t.TempDir(), "through-serve")
	if err := os.WriteFile(wrapper, []byte(fmt.Sprintf(clientWrapper, proxyBin, client)), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, scenario := range conformanceClientScenarios {
		t.Run(scenario, func(t *testing.T) {
			direct := conformance(t, ctx, "client", "--command", client, "--scenario", scenario)
			proxied := conformance(t, ctx, "client", "--command", wrapper, "--scenario", scenario)
			sameFindings(t, "serve --upstream", proxied, direct)
		})
	}
}

// clientWrapper is the shell script of TestConformanceClientThroughServe,
// given the proxy's path and the client's. The suite reads nothing of
// serve's stderr, so the script prints it after the client's own when
// either fails.
const clientWrapper = `#!/bin/sh
eval "url=\${$#}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
proxy=%q
client=%q
"$proxy" serve --listen 127.0.0.1:0 --upstream "$url" 2>"$log" &
pid=$!
i=0
until grep -q 'serving MCP over Streamable HTTP' "$log"; do
	i=$((i + 1))
	if [ $i -gt 600 ] || ! kill -0 $pid 2>/dev/null; then
		echo "serve did not start:" >&2; cat "$log" >&2; exit 1
	fi
	sleep 0.1
done
served=$(sed -n 's/.*msg="serving MCP over Streamable HTTP" url=\([^ ]*\).*/\1/p' "$log" | head -n 1)
# Every argument but the last, then serve's URL in place of the server's.
n=$#
for a in "$@"; do
	n=$((n - 1))
	if [ $n -gt 0 ]; then set -- "$@" "$a"; fi
	shift
done
"$client" "$@" "$served"
code=$?
# SIGTERM: a background job of a shell ignores SIGINT, and so does serve.
kill -TERM $pid
wait $pid
stopped=$?
if [ $code -ne 0 ] || [ $stopped -ne 0 ]; then
	echo "serve exited $stopped; its stderr:" >&2; cat "$log" >&2
fi
[ $stopped -eq 0 ] || exit $stopped
exit $code
`
