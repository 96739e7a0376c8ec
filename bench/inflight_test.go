package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkInFlight measures throughput rather than latency: it keeps
// window tools/calls with distinct arguments in flight on a chain (32,
// or MCP_IDEMPOTENT_BENCH_INFLIGHT), sending the next as each answer
// comes, and reports each chain's calls/s with the chain's name before
// it (proxy-calls/s). Every call through the proxy is a new execution.
//
// The chains take turns of block calls (500, or
// MCP_IDEMPOTENT_BENCH_BLOCK) in an order that rotates, as
// BenchmarkInterleaved's do, so that a load spike falls on every chain
// alike; b.N calls are made on each. The replaying chain is left out: its
// calls at once would attach to one execution, another measure.
func BenchmarkInFlight(b *testing.B) {
	window := envInt(b, "MCP_IDEMPOTENT_BENCH_INFLIGHT", 32)
	if window > maxWindow {
		b.Fatalf("MCP_IDEMPOTENT_BENCH_INFLIGHT=%d: at most %d, or the calls sent before an answer is read could fill the pipes both ways", window, maxWindow)
	}
	block := envInt(b, "MCP_IDEMPOTENT_BENCH_BLOCK", 500)
	var runs []*flightRun
	defer func() {
		for _, r := range runs {
			r.close()
		}
	}()
	for _, c := range chains() {
		if c.replay {
			continue
		}
		if c.proxy && bins.proxyErr != nil {
			b.Logf("%s skipped: proxy unavailable: %v", c.name, bins.proxyErr)
			continue
		}
		runs = append(runs, &flightRun{chainRun: startChain(b, c), pending: make(map[string]bool, window)})
	}
	b.ResetTimer()
	for i, done := 0, 0; done < b.N; i++ {
		n := min(block, b.N-done)
		for j := range runs {
			runs[(i+j)%len(runs)].turn(n, window)
		}
		done += n
	}
	b.StopTimer()
	for _, r := range runs {
		r.close()
		b.ReportMetric(float64(r.calls)/r.took.Seconds(), r.name+"-calls/s")
		b.ReportMetric(float64(r.upstreamAfter-r.upstreamBefore)/float64(r.calls), r.name+"-upstream-calls/op")
	}
}

// maxWindow bounds BenchmarkInFlight's calls in flight. The calls of a
// window are written before any answer is read, and a chain whose
// answers fill its pipe stops reading: 256 answers fit in the 64 KiB of a
// Linux pipe with room to spare.
const maxWindow = 256

// flightRun is a chain under BenchmarkInFlight: the calls it made and the
// time its turns took.
type flightRun struct {
	*chainRun
	pending map[string]bool // the ids of the calls in flight
	calls   int
	took    time.Duration
}

// turn makes n calls, at most window of them in flight, and waits for
// every answer.
func (r *flightRun) turn(n, window int) {
	start := time.Now()
	sent := 0
	for ; sent < min(n, window); sent++ {
		r.send()
	}
	for range n {
		r.receive()
		if sent < n {
			r.send()
			sent++
		}
	}
	r.took += time.Since(start)
	r.calls += n
}

// send writes the chain's next call.
func (r *flightRun) send() {
	r.seq++
	r.pending[strconv.Itoa(r.seq)] = true
	r.cl.send(r.cl.callFrame(r.seq, fmt.Sprintf("4242-0000-0000-%06d", r.seq), 100+r.seq))
}

// receive reads the answer to one of the calls in flight, whichever comes,
// skipping notifications, and checks it.
func (r *flightRun) receive() {
	c := r.cl
	for {
		line, err := c.out.ReadBytes('\n')
		if err != nil {
			c.fatalf("reading from %q with %d calls in flight: %v", c.argv, len(r.pending), err)
		}
		var rep reply
		if err := json.Unmarshal(line, &rep); err != nil {
			c.fatalf("bad frame %q: %v", line, err)
		}
		if rep.Method != "" {
			continue // a notification
		}
		id := string(rep.ID)
		if !r.pending[id] {
			c.fatalf("an answer to id %s, which is not in flight: %q", id, line)
		}
		delete(r.pending, id)
		if rep.Error != nil || rep.Result == nil || len(rep.Result.Content) == 0 || rep.Result.IsError {
			c.fatalf("tools/call id %s: unexpected answer %q", id, line)
		}
		text := rep.Result.Content[0].Text
		i := strings.LastIndexByte(text, '#')
		count, err := strconv.Atoi(text[i+1:])
		if !strings.HasPrefix(text, "charged ") || i < 0 || err != nil {
			c.fatalf("tools/call id %s: unexpected text %q", id, text)
		}
		r.upstreamAfter = max(r.upstreamAfter, count)
		return
	}
}

// envInt returns the whole number 1 or more in the environment variable
// name, or def if it is not set.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a whole number, 1 or more", name, v)
	}
	return n
}
