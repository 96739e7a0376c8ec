//go:build unix

package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

// Set once by TestMain, read-only afterwards.
var (
	moduleRoot string
	proxyBin   string
	ledgerBin  string
	size       sizes
	baseSeed   uint64
)

// sizes are how much of each case a run does.
type sizes struct {
	name        string
	stormIntent int // intents per storm; each is sent once through each of 4 proxies
	killLoops   int // kill -9 loops per shared store
	crashCalls  int // calls under way when the upstream exits
	outageCalls int // distinct intents sent while the store is killed and restarted
	mutations   int // random mutations of a valid frame sent to one proxy
}

var (
	small = sizes{name: "small", stormIntent: 100, killLoops: 5, crashCalls: 4, outageCalls: 100, mutations: 500}
	full  = sizes{name: "full", stormIntent: 2500, killLoops: 30, crashCalls: 32, outageCalls: 1000, mutations: 10000}
)

// raceEnabled is set when the tests run with -race (race_test.go): the
// proxy is then built with the race detector too.
var raceEnabled bool

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	switch s := os.Getenv("MCPI_TORTURE_SIZE"); s {
	case "", "small":
		size = small
	case "full":
		size = full
	default:
		fmt.Fprintf(os.Stderr, "torture: MCPI_TORTURE_SIZE=%q: want small or full\n", s)
		return 2
	}
	baseSeed = uint64(time.Now().UnixNano())
	if s := os.Getenv("MCPI_TORTURE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "torture: MCPI_TORTURE_SEED=%q: %v\n", s, err)
			return 2
		}
		baseSeed = n
	}
	fmt.Fprintf(os.Stderr, "torture: size %s, seed %d (replay with MCPI_TORTURE_SEED=%d)\n", size.name, baseSeed, baseSeed)

	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || len(bytes.TrimSpace(gomod)) == 0 {
		fmt.Fprintln(os.Stderr, "torture: finding the module root: go env GOMOD:", err)
		return 1
	}
	moduleRoot = filepath.Dir(string(bytes.TrimSpace(gomod)))
	dir, err := os.MkdirTemp("", "mcpi-torture-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "torture:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	proxyBin = filepath.Join(dir, "mcp-idempotent")
	ledgerBin = filepath.Join(dir, "ledgerserver")
	for out, pkg := range map[string]string{proxyBin: "./cmd/mcp-idempotent", ledgerBin: "./test/torture/ledgerserver"} {
		args := []string{"build", "-o", out}
		if raceEnabled && out == proxyBin {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir = moduleRoot
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "torture: building %s: %v\n%s", pkg, err, b)
			return 1
		}
	}
	code := m.Run()
	skipnote.Report("test/torture")
	return code
}

// seeded returns the test's random source, derived from the run's seed and
// the test's name so that each test replays alone, and logs how to replay.
func seeded(t *testing.T) *rand.Rand {
	t.Helper()
	var h uint64 = 14695981039346656037
	for _, c := range []byte(t.Name()) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	t.Logf("seed %d (replay with MCPI_TORTURE_SEED=%d -run '^%s$')", baseSeed, baseSeed, strings.Split(t.Name(), "/")[0])
	return rand.New(rand.NewPCG(baseSeed, h))
}

// testContext bounds a test's waits to d, and to a minute before go
// test's own timeout, so that a hang fails one test and says where. It is
// never a measure of speed.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	if end, ok := t.Deadline(); ok {
		d = min(d, time.Until(end)-time.Minute)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// proc is a proxy process a test started, with the stderr of it and of
// its upstream (which inherits it).
type proc struct {
	cmd    *exec.Cmd
	stderr *output
}

// proxyCommand returns the proxy run with flags in front of a ledgerserver
// writing to ledger, in a process group of its own. When the test ends the
// whole group is killed, and a panic or data race in the proxy's stderr
// fails the test.
func proxyCommand(t *testing.T, ledger string, flags ...string) *proc {
	t.Helper()
	args := append(slices.Clone(flags), "--", ledgerBin, "-ledger", ledger)
	cmd := exec.Command(proxyBin, args...)
	// A race-detector build must exit at once and fail on a race.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The upstream may hold the stderr pipe a moment after the proxy ends.
	cmd.WaitDelay = 2 * time.Second
	p := &proc{cmd: cmd, stderr: new(output)}
	cmd.Stderr = p.stderr
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		if s := p.stderr.String(); strings.Contains(s, "panic:") || strings.Contains(s, "DATA RACE") {
			t.Errorf("%s crashed:\n%s", cmd, crash(s))
		}
	})
	return p
}

// kill9 sends SIGKILL to the proxy alone: its upstream is told by the
// kernel (the proxy asks for a parent-death signal), as in a real crash.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %s: %v", p.cmd, err)
	}
}

// session is the official go-sdk client connected to a proxy process.
type session struct {
	*mcp.ClientSession
	*proc
}

// connect starts p and connects a go-sdk client to it over its stdio. The
// session is closed when the test ends.
func connect(t *testing.T, ctx context.Context, p *proc) *session {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpi-torture", Version: "0.0.1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: p.cmd, TerminateDuration: 2 * time.Second}, nil)
	if err != nil {
		if p.cmd.Process != nil {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			_ = p.cmd.Wait()
		}
		t.Fatalf("connecting to %s: %v\nstderr:\n%s", p.cmd, err, tail(p.stderr.String()))
	}
	t.Cleanup(func() {
		_ = cs.Close()
		if t.Failed() {
			t.Logf("stderr of %s:\n%s", p.cmd, tail(p.stderr.String()))
		}
	})
	return &session{cs, p}
}

// pay calls tool (pay or pay_and_exit) for intent.
func (s *session) pay(ctx context.Context, tool, intent string, holdMS int) (*mcp.CallToolResult, error) {
	args := map[string]any{"intent": intent}
	if holdMS > 0 {
		args["hold_ms"] = holdMS
	}
	return s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
}

// paidText is what pay answers for intent, run by the upstream pid.
func paidText(intent string, pid int) string {
	return fmt.Sprintf("paid %s (pid %d)", intent, pid)
}

// firstText is the text of res's first content block, or "".
func firstText(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

// executionID is the id of the execution record in res's _meta, or "".
func executionID(res *mcp.CallToolResult) string {
	exe, _ := res.Meta["mcp-idempotent/execution"].(map[string]any)
	id, _ := exe["id"].(string)
	return id
}

// isUnknown reports whether res is the proxy's "outcome unknown" answer.
func isUnknown(res *mcp.CallToolResult) bool {
	return res != nil && res.IsError && strings.HasPrefix(firstText(res), "Outcome unknown:")
}

// A ledgerLine is one side effect: the intent, the execution id the proxy
// forwarded, and the upstream process that ran it.
type ledgerLine struct {
	intent, execution string
	pid               int
}

// readLedger returns the ledger's lines by intent.
func readLedger(t *testing.T, ledger string) map[string][]ledgerLine {
	t.Helper()
	b, err := os.ReadFile(ledger)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	lines := map[string][]ledgerLine{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			if l != "" {
				t.Fatalf("ledger line %q: want INTENT EXECUTION PID", l)
			}
			continue
		}
		pid, _ := strconv.Atoi(f[2])
		lines[f[0]] = append(lines[f[0]], ledgerLine{f[0], f[1], pid})
	}
	return lines
}

// duplicates counts the side effects past the first of each intent.
func duplicates(lines map[string][]ledgerLine) int {
	n := 0
	for _, l := range lines {
		n += max(0, len(l)-1)
	}
	return n
}

// A shownRecord is what `activity show --json` prints, in the parts the
// tests compare with what a caller was told.
type shownRecord struct {
	ID      string          `json:"id"`
	State   string          `json:"state"`
	Tool    string          `json:"tool"`
	Result  json.RawMessage `json:"result"`
	History []struct {
		State string `json:"state"`
		Note  string `json:"note"`
	} `json:"history"`
}

// showRecord runs `activity show ID --json` against store.
func showRecord(t *testing.T, ctx context.Context, store, id string) shownRecord {
	t.Helper()
	cmd := exec.CommandContext(ctx, proxyBin, "activity", "show", id, "--store", store, "--json")
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("activity show %s: %v\n%s%s", id, err, out.String(), errOut.String())
	}
	var r shownRecord
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("activity show %s --json: %v\n%s", id, err, out.String())
	}
	return r
}

// resultText is the text of a stored CallToolResult's first content block.
func (r shownRecord) resultText() string {
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(r.Result, &res) != nil || len(res.Content) == 0 {
		return ""
	}
	return res.Content[0].Text
}

// An output keeps what a process writes (its stderr) and tells waiters
// when a given text has appeared in it.
type output struct {
	mu      sync.Mutex // protects the fields below
	b       strings.Builder
	waiters map[string][]chan struct{} // by the text they wait for
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	from := o.b.Len()
	o.b.Write(p)
	for text, chans := range o.waiters {
		// Only what this write added can hold the text for the first time.
		if strings.Contains(o.b.String()[max(0, from-len(text)):], text) {
			for _, c := range chans {
				close(c)
			}
			delete(o.waiters, text)
		}
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// waitFor waits until text has been written, or ctx ends.
func (o *output) waitFor(ctx context.Context, text string) error {
	o.mu.Lock()
	if strings.Contains(o.b.String(), text) {
		o.mu.Unlock()
		return nil
	}
	c := make(chan struct{})
	if o.waiters == nil {
		o.waiters = map[string][]chan struct{}{}
	}
	o.waiters[text] = append(o.waiters[text], c)
	o.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %q: %w", text, ctx.Err())
	}
}

// tail is the end of a long log, for a failure message.
// crash returns the start of the first panic or race report in s, the
// part that names the conflicting accesses, which a tail cuts off.
func crash(s string) string {
	for _, mark := range []string{"WARNING: DATA RACE", "panic:"} {
		if i := strings.Index(s, mark); i >= 0 {
			return "[...]\n" + s[i:min(len(s), i+32<<10)]
		}
	}
	return tail(s)
}

func tail(s string) string {
	const n = 16 << 10
	if len(s) <= n {
		return s
	}
	return "[...]\n" + s[len(s)-n:]
}
