// Package bench measures what mcp-idempotent adds to a tools/call round trip,
// at the process level, against two baselines in the same run:
//
//	direct        client -> benchserver
//	relay         client -> relay (bare io.Copy, one extra process hop) -> benchserver
//	proxy         client -> mcp-idempotent -> benchserver, distinct arguments per call
//	                (every call is a new execution: fingerprint, reserve, dispatch, complete)
//	proxy-replay  client -> mcp-idempotent -> benchserver, the same arguments every call
//	                (every timed call is a replay of the first)
//
// The binaries are built into a temporary directory by TestMain, only when
// benchmarks were asked for (-bench), so `go test ./...` stays fast. Setting
// MCP_IDEMPOTENT_BENCH_BIN to a directory holding benchserver, relay and
// mcp-idempotent uses those instead (bench/run.sh does this). Run with
// bench/run.sh, or:
//
//	go test ./bench -run '^$' -bench . -benchtime 2000x -count 5
package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const modulePath = "github.com/mcp-idempotent/mcp-idempotent"

// warmupCalls are made after the handshake and before the timer starts, so
// the first call's one-off costs (page faults, lazy initialisation, a proxy
// learning the tool list) stay out of the figures.
const warmupCalls = 20

// bins holds the paths of the binaries under test. Written once by TestMain
// before any benchmark runs.
var bins struct {
	server, relay, proxy string
	proxyErr             error // why the proxy is unavailable; proxy benchmarks skip
}

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	cleanup, err := setupBinaries()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// setupBinaries fills bins, from MCP_IDEMPOTENT_BENCH_BIN or by building.
func setupBinaries() (cleanup func(), err error) {
	if dir := os.Getenv("MCP_IDEMPOTENT_BENCH_BIN"); dir != "" {
		bins.server = filepath.Join(dir, "benchserver")
		bins.relay = filepath.Join(dir, "relay")
		bins.proxy = filepath.Join(dir, "mcp-idempotent")
		for _, p := range []string{bins.server, bins.relay} {
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("using MCP_IDEMPOTENT_BENCH_BIN: %w", err)
			}
		}
		if _, err := os.Stat(bins.proxy); err != nil {
			bins.proxyErr = err
		}
		return func() {}, nil
	}
	dir, err := os.MkdirTemp("", "mcp-idempotent-bench-")
	if err != nil {
		return nil, fmt.Errorf("creating build directory: %w", err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	bins.server = filepath.Join(dir, "benchserver")
	bins.relay = filepath.Join(dir, "relay")
	bins.proxy = filepath.Join(dir, "mcp-idempotent")
	for _, b := range []struct{ out, pkg string }{
		{bins.server, modulePath + "/bench/benchserver"},
		{bins.relay, modulePath + "/bench/relay"},
	} {
		if err := goBuild(b.out, b.pkg); err != nil {
			cleanup()
			return nil, err
		}
	}
	// The proxy failing to build must not hide the baselines.
	bins.proxyErr = goBuild(bins.proxy, modulePath+"/cmd/mcp-idempotent")
	return cleanup, nil
}

func goBuild(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// A chain is one path from the benchmark's client to the server.
type chain struct {
	name   string
	argv   func() []string
	proxy  bool // the chain's head is mcp-idempotent
	replay bool // every call has the same arguments
}

func chains() []chain {
	proxyArgs := strings.Fields(os.Getenv("MCP_IDEMPOTENT_BENCH_PROXY_FLAGS"))
	proxy := func() []string {
		return slices.Concat([]string{bins.proxy}, proxyArgs, []string{"--", bins.server})
	}
	cs := []chain{
		{name: "direct", argv: func() []string { return []string{bins.server} }},
		{name: "relay", argv: func() []string { return []string{bins.relay, "--", bins.server} }},
		{name: "proxy", proxy: true, argv: proxy},
		{name: "proxy-replay", proxy: true, replay: true, argv: proxy},
	}
	if baseline := os.Getenv("MCP_IDEMPOTENT_BENCH_BASELINE"); baseline != "" {
		// Another build of the proxy, to compare with this one in one
		// run: new executions only.
		cs = append(cs, chain{name: "baseline", argv: func() []string {
			return slices.Concat([]string{baseline}, proxyArgs, []string{"--", bins.server})
		}})
	}
	return cs
}

// BenchmarkCall times sequential tools/call round trips through each chain,
// one chain after the other. Besides ns/op it reports, per call: p50-ns and
// p99-ns (latency percentiles), cpu-ns/op (CPU time of the whole chain,
// server included), upstream-calls/op (how many calls reached the server: 1
// for a new execution, 0 for a replay) and replayed/op (answers marked
// _meta["mcp-idempotent/replayed"]).
func BenchmarkCall(b *testing.B) {
	for _, c := range chains() {
		b.Run(c.name, func(b *testing.B) {
			if c.proxy && bins.proxyErr != nil {
				b.Skipf("proxy unavailable: %v", bins.proxyErr)
			}
			r := startChain(b, c)
			defer r.close()
			for b.Loop() {
				r.call()
			}
			r.report("")
		})
	}
}

// BenchmarkInterleaved times the chains of BenchmarkCall all at once: each
// iteration makes one call on each chain, in an order that rotates from one
// iteration to the next, and the metrics of BenchmarkCall are reported with
// the chain's name before them (proxy-p50-ns). A load spike thus falls on
// every chain alike. It measures another regime than BenchmarkCall: the
// other chains run between two calls of one chain, so every call finds the
// chain's processes asleep and their caches cold, as calls spaced out by a
// model's thinking do. ns/op is the time of one call on every chain.
//
// MCP_IDEMPOTENT_BENCH_BLOCK=N makes each turn N calls on one chain
// instead of one: with N = 100, say, the calls of a turn find the chain
// warm, as BenchmarkCall's do, while a load spike still lasts across the
// turns of every chain.
func BenchmarkInterleaved(b *testing.B) {
	var runs []*chainRun
	defer func() {
		for _, r := range runs {
			r.close()
		}
	}()
	for _, c := range chains() {
		if c.proxy && bins.proxyErr != nil {
			b.Logf("%s skipped: proxy unavailable: %v", c.name, bins.proxyErr)
			continue
		}
		runs = append(runs, startChain(b, c))
	}
	block := 1
	if v := os.Getenv("MCP_IDEMPOTENT_BENCH_BLOCK"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("MCP_IDEMPOTENT_BENCH_BLOCK=%q: want a whole number of calls, 1 or more", v)
		}
		block = n
	}
	// b.N calls on each chain, in turns of block calls. (b.N rather than
	// b.Loop, whose iterations cannot be grouped by chain: the testing
	// package first calls the benchmark with b.N = 1, which only starts
	// the chains once more.)
	b.ResetTimer()
	for i, done := 0, 0; done < b.N; i++ {
		n := min(block, b.N-done)
		for j := range runs {
			r := runs[(i+j)%len(runs)]
			for range n {
				r.call()
			}
		}
		done += n
	}
	b.StopTimer()
	for _, r := range runs {
		r.report(r.chain.name + "-")
	}
}

// chainRun is one chain under measurement: its client and what its calls
// measured.
type chainRun struct {
	chain
	cl     *client
	closed bool
	seq    int

	lat                           []time.Duration
	upstreamBefore, upstreamAfter int
	replayed                      int
	// faultsBefore and faultsAfter are the head process's minor page
	// faults (minorFaults) before the first timed call and after the
	// last, or -1.
	faultsBefore, faultsAfter int64
	cpu                       time.Duration // of the whole chain, once closed; 0 if unknown
}

// startChain starts c, makes the handshake and the untimed warm-up calls.
func startChain(b *testing.B, c chain) *chainRun {
	r := &chainRun{chain: c, cl: startClient(b, c.argv()), lat: make([]time.Duration, 0, 4096)}
	r.cl.handshake()
	for range warmupCalls {
		res := r.roundTrip()
		r.upstreamBefore = max(r.upstreamBefore, res.upstreamCount)
	}
	r.upstreamAfter = r.upstreamBefore
	r.faultsBefore = minorFaults(r.cl.cmd.Process.Pid)
	return r
}

// roundTrip makes the chain's next call and returns what it measured.
func (r *chainRun) roundTrip() callResult {
	r.seq++
	var req []byte
	if r.replay {
		req = r.cl.callFrame(r.seq, "4242-4242-4242-4242", 100)
	} else {
		req = r.cl.callFrame(r.seq, fmt.Sprintf("4242-0000-0000-%06d", r.seq), 100+r.seq)
	}
	start := time.Now()
	res := r.cl.roundTrip(req, r.seq)
	res.took = res.at.Sub(start)
	return res
}

// call makes one timed call.
func (r *chainRun) call() {
	res := r.roundTrip()
	r.lat = append(r.lat, res.took)
	r.upstreamAfter = max(r.upstreamAfter, res.upstreamCount)
	if res.replayed {
		r.replayed++
	}
}

// close ends the chain, once, and takes its CPU time.
func (r *chainRun) close() {
	if r.closed {
		return
	}
	r.closed = true
	r.faultsAfter = minorFaults(r.cl.cmd.Process.Pid)
	if st := r.cl.close(); st != nil {
		r.cpu = st.UserTime() + st.SystemTime()
	}
}

// report closes the chain and reports its metrics, their names prefixed.
func (r *chainRun) report(prefix string) {
	b := r.cl.b
	r.close()
	n := float64(len(r.lat))
	if n == 0 {
		return
	}
	// The chain's CPU time, from wait4: the head process and the children
	// it reaped (the server). It includes start-up and the warm-up calls,
	// shared out over every call made.
	if r.cpu > 0 {
		b.ReportMetric(float64(r.cpu.Nanoseconds())/(n+warmupCalls), prefix+"cpu-ns/op")
	}
	if w, _ := strconv.Atoi(os.Getenv("MCP_IDEMPOTENT_BENCH_WINDOW")); w > 0 {
		b.Logf("%s: p50 of each %d calls in turn, us: %s", r.chain.name, w, windowP50s(r.lat, w))
	}
	lat := slices.Clone(r.lat)
	slices.Sort(lat)
	b.ReportMetric(float64(percentile(lat, 0.50).Nanoseconds()), prefix+"p50-ns")
	b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds()), prefix+"p99-ns")
	b.ReportMetric(float64(r.upstreamAfter-r.upstreamBefore)/n, prefix+"upstream-calls/op")
	b.ReportMetric(float64(r.replayed)/n, prefix+"replayed/op")
	if r.faultsBefore >= 0 && r.faultsAfter >= 0 {
		b.ReportMetric(float64(r.faultsAfter-r.faultsBefore)/n, prefix+"faults/op")
	}
}

// windowP50s returns the p50 of each w latencies of lat in turn, in
// microseconds: a process's first calls apart from its later ones.
func windowP50s(lat []time.Duration, w int) string {
	var out []string
	for i := 0; i+w <= len(lat); i += w {
		win := slices.Clone(lat[i : i+w])
		slices.Sort(win)
		out = append(out, fmt.Sprintf("%.0f", float64(percentile(win, 0.50).Nanoseconds())/1e3))
	}
	return strings.Join(out, " ")
}

// percentile returns the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// client is a raw line client: one JSON-RPC frame per line, one request in
// flight at a time.
type client struct {
	b      *testing.B
	argv   []string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *os.File
	buf    []byte // request frame, reused
}

func startClient(b *testing.B, argv []string) *client {
	b.Helper()
	stderr, err := os.Create(filepath.Join(b.TempDir(), "stderr"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting %q: %v", argv, err)
	}
	return &client{b: b, argv: argv, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 64<<10), stderr: stderr}
}

// close ends the chain the way an MCP client does on stdio: close stdin, then
// wait; kill only if the chain does not exit. It returns the head process's
// state, nil if it had to be killed.
func (c *client) close() *os.ProcessState {
	_ = c.in.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	defer c.stderr.Close()
	select {
	case <-done:
		return c.cmd.ProcessState
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
		c.b.Logf("%q did not exit within 5s of stdin closing; killed", c.argv)
		return nil
	}
}

// fatalf stops the benchmark with the chain's stderr attached.
func (c *client) fatalf(format string, args ...any) {
	c.b.Helper()
	msg := fmt.Sprintf(format, args...)
	if tail, err := os.ReadFile(c.stderr.Name()); err == nil && len(tail) > 0 {
		if len(tail) > 4096 {
			tail = tail[len(tail)-4096:]
		}
		msg += "\nstderr of " + filepath.Base(c.argv[0]) + ":\n" + string(tail)
	}
	c.b.Fatal(msg)
}

func (c *client) handshake() {
	c.b.Helper()
	c.send([]byte(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mcp-idempotent-bench","version":"0.0.0"}}}` + "\n"))
	c.expect(`"init"`)
	c.send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"))
	// A real client lists tools before calling one; a proxy may take its
	// per-tool policy from these annotations.
	c.send([]byte(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}` + "\n"))
	c.expect(`"list"`)
}

// callFrame builds a tools/call request for charge_card in the reused buffer.
func (c *client) callFrame(id int, card string, amount int) []byte {
	c.buf = append(c.buf[:0], `{"jsonrpc":"2.0","id":`...)
	c.buf = strconv.AppendInt(c.buf, int64(id), 10)
	c.buf = append(c.buf, `,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"`...)
	c.buf = append(c.buf, card...)
	c.buf = append(c.buf, `","amount":`...)
	c.buf = strconv.AppendInt(c.buf, int64(amount), 10)
	c.buf = append(c.buf, "}}}\n"...)
	return c.buf
}

func (c *client) send(frame []byte) {
	if _, err := c.in.Write(frame); err != nil {
		c.fatalf("writing to %q: %v", c.argv, err)
	}
}

// reply is the part of a response the benchmark checks.
type reply struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result *struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool                       `json:"isError"`
		Meta    map[string]json.RawMessage `json:"_meta"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// expect reads frames until the response with the given raw id, skipping
// notifications, and returns it with the time its last byte was read.
func (c *client) expect(id string) (reply, time.Time) {
	c.b.Helper()
	for {
		line, err := c.out.ReadBytes('\n')
		at := time.Now()
		if err != nil {
			if errors.Is(err, io.EOF) {
				c.fatalf("%q closed its stdout while waiting for id %s", c.argv, id)
			}
			c.fatalf("reading from %q: %v", c.argv, err)
		}
		var r reply
		if err := json.Unmarshal(line, &r); err != nil {
			c.fatalf("bad frame %q: %v", line, err)
		}
		if r.Method != "" {
			if len(r.ID) > 0 {
				c.fatalf("unexpected server-to-client request %q", line)
			}
			continue // notification
		}
		if string(r.ID) != id {
			c.fatalf("response id %s, want %s: %q", r.ID, id, line)
		}
		if r.Error != nil {
			c.fatalf("JSON-RPC error %d %s", r.Error.Code, r.Error.Message)
		}
		return r, at
	}
}

// callResult is one timed tools/call answer.
type callResult struct {
	at            time.Time     // when the last byte of the answer was read
	took          time.Duration // from just before the request was written
	upstreamCount int           // the server's tools/call counter carried in the text
	replayed      bool
}

func (c *client) roundTrip(frame []byte, id int) callResult {
	c.send(frame)
	r, at := c.expect(strconv.Itoa(id))
	if r.Result == nil || len(r.Result.Content) == 0 || r.Result.IsError {
		c.fatalf("tools/call id %d: unexpected result %+v", id, r.Result)
	}
	text := r.Result.Content[0].Text
	i := strings.LastIndexByte(text, '#')
	n, err := strconv.Atoi(text[i+1:])
	if !strings.HasPrefix(text, "charged ") || i < 0 || err != nil {
		c.fatalf("tools/call id %d: unexpected text %q", id, text)
	}
	return callResult{
		at:            at,
		upstreamCount: n,
		replayed:      bytes.Equal(r.Result.Meta["mcp-idempotent/replayed"], []byte("true")),
	}
}
