// Package deptest checks that imports point one way along the data path
// (DESIGN.md section 11), as Tailscale's tstest/deptest does: the leaves
// import no other internal package; the interceptor knows nothing of the
// session pump, the transports or the command line; transports, stores
// and the policy know nothing of what uses them.
package deptest

import (
	"bytes"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const (
	module   = "github.com/mcp-idempotent/mcp-idempotent"
	internal = module + "/internal/"
)

// deps returns the packages each of pkgs imports, directly or not, keyed by
// the package's import path relative to the module. Test files do not count.
func deps(t *testing.T, pkgs ...string) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	args := []string{"list", "-f", `{{.ImportPath}} {{join .Deps " "}}`}
	for _, p := range pkgs {
		args = append(args, module+"/"+p)
	}
	cmd := exec.Command(goTool, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	m := make(map[string][]string)
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		m[strings.TrimPrefix(fields[0], module+"/")] = fields[1:]
	}
	for _, p := range pkgs {
		if _, ok := m[p]; !ok {
			t.Fatalf("go list said nothing about %s", p)
		}
	}
	return m
}

// TestLeaves checks that the leaf packages import no other package of this
// module's internal tree.
func TestLeaves(t *testing.T) {
	leaves := []string{"internal/jsonrpc", "internal/fingerprint", "internal/record", "internal/retry", "internal/journal"}
	for pkg, ds := range deps(t, leaves...) {
		for _, d := range ds {
			if strings.HasPrefix(d, internal) {
				t.Errorf("%s imports %s; a leaf must import no other internal package", pkg, strings.TrimPrefix(d, module+"/"))
			}
		}
	}
}

// oneWay is what each inner part of the data path may not import: only
// the CLI wires concrete parts together.
var oneWay = map[string][]string{
	// The interceptor defines the interfaces it needs; the session
	// pump, the transports and the concrete stores plug into them.
	"internal/intercept": {"internal/proxy", "internal/cli", "internal/transport", "internal/record/"},
	// The pump speaks to connections through an interface, too.
	"internal/proxy": {"internal/cli", "internal/transport", "internal/record/"},
	// Transports carry frames; what a frame means is decided above them.
	"internal/transport/stdio":      {"internal/proxy", "internal/intercept", "internal/policy", "internal/cli"},
	"internal/transport/streamhttp": {"internal/proxy", "internal/intercept", "internal/policy", "internal/cli"},
	// A store keeps records; it does not know who makes them.
	"internal/record/memstore":    storeForbidden,
	"internal/record/sqlitestore": storeForbidden,
	"internal/record/redisstore":  storeForbidden,
	"internal/record/pgstore":     storeForbidden,
	// The stores' batch queue knows calls, not what they write.
	"internal/record/batch": append(storeForbidden, "internal/record"),
	// The stores' cache knows ids, not records.
	"internal/record/idcache": append(storeForbidden, "internal/record"),
	// MCP's shapes are read with the frame codec alone.
	"internal/mcp": {"internal/intercept", "internal/proxy", "internal/policy", "internal/cli", "internal/transport",
		"internal/record", "internal/fingerprint", "internal/retry", "internal/journal"},
	// Tracing sees spans and records, never who makes them.
	"internal/telemetry": {"internal/intercept", "internal/proxy", "internal/policy", "internal/cli", "internal/transport", "internal/record/"},
	// The policy is data the interceptor reads, never the reverse.
	"internal/policy": {"internal/intercept", "internal/proxy", "internal/cli", "internal/transport"},
}

// storeForbidden is what no store backend may import.
var storeForbidden = []string{"internal/intercept", "internal/proxy", "internal/policy", "internal/cli", "internal/transport"}

// TestOneWay checks that inner parts of the data path do not import the
// outer ones.
func TestOneWay(t *testing.T) {
	pkgs := slices.Sorted(maps.Keys(oneWay))
	for pkg, ds := range deps(t, pkgs...) {
		for _, d := range ds {
			rel := strings.TrimPrefix(d, module+"/")
			for _, f := range oneWay[pkg] {
				if matches(rel, f) {
					t.Errorf("%s imports %s; imports must point one way along the data path", pkg, rel)
				}
			}
		}
	}
}

// TestEveryPartChecked keeps oneWay whole: a new store backend or
// transport must say what it may not import.
func TestEveryPartChecked(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	out, err := exec.Command(goTool, "list", module+"/internal/record/...", module+"/internal/transport/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for line := range strings.Lines(string(out)) {
		p := strings.TrimPrefix(strings.TrimSpace(line), module+"/")
		if p == "internal/record" || p == "internal/record/recordtest" {
			continue // the leaf and its test suite
		}
		n++
		if _, ok := oneWay[p]; !ok {
			t.Errorf("%s is not in oneWay: say what it may not import", p)
		}
	}
	if n == 0 {
		t.Error("go list found no store backend or transport")
	}
}

// matches reports whether the package rel is forbidden by pattern: a
// pattern ending in a slash names the packages below it (record/memstore,
// not record itself), any other the package and those below it.
func matches(rel, pattern string) bool {
	if strings.HasSuffix(pattern, "/") {
		return strings.HasPrefix(rel, pattern)
	}
	return rel == pattern || strings.HasPrefix(rel, pattern+"/")
}

// TestSeesInternalImports guards the other tests against passing because
// go list reported nothing: the CLI must be seen to import the proxy.
func TestSeesInternalImports(t *testing.T) {
	ds := deps(t, "internal/cli")["internal/cli"]
	if !slices.Contains(ds, internal+"proxy") {
		t.Errorf("go list does not show internal/cli importing internal/proxy: %q", ds)
	}
}

func TestMatches(t *testing.T) {
	tests := []struct {
		rel, pattern string
		want         bool
	}{
		{"internal/proxy", "internal/proxy", true},
		{"internal/proxy/sub", "internal/proxy", true},
		{"internal/proxyish", "internal/proxy", false},
		{"internal/transport/stdio", "internal/transport", true},
		{"internal/record", "internal/record/", false},
		{"internal/record/memstore", "internal/record/", true},
	}
	for _, tt := range tests {
		if got := matches(tt.rel, tt.pattern); got != tt.want {
			t.Errorf("matches(%q, %q) = %v, want %v", tt.rel, tt.pattern, got, tt.want)
		}
	}
}
