// Package httpbench measures what `mcp-idempotent serve` costs per call over
// Streamable HTTP, side by side with talking to the upstream directly:
//
//	direct        client -> chargeserver (go-sdk, Streamable HTTP)
//	relay         client -> a bare reverse proxy (httputil) -> chargeserver
//	serve         client -> mcp-idempotent serve --upstream URL -> chargeserver
//	serve-stdio   client -> mcp-idempotent serve -- benchserver (stdio)
//
// Each chain runs two benchmarks: latency (sequential calls, one in flight:
// p50-ns and p99-ns) and throughput (16 callers at once on one session:
// req/s). Every call is a new execution (distinct arguments).
//
//	go test ./bench/httpbench -run '^$' -bench . -benchtime 2000x -count 5
package httpbench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const modulePath = "github.com/mcp-idempotent/mcp-idempotent"

// bins are the programs the chains run, built by TestMain.
var bins struct{ proxy, charge, bench string }

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // no benchmark asked for: build nothing
	}
	dir, err := os.MkdirTemp("", "mcp-idempotent-httpbench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpbench:", err)
		os.Exit(1)
	}
	bins.proxy = filepath.Join(dir, "mcp-idempotent")
	bins.charge = filepath.Join(dir, "chargeserver")
	bins.bench = filepath.Join(dir, "benchserver")
	for _, b := range []struct{ out, pkg string }{
		{bins.proxy, modulePath + "/cmd/mcp-idempotent"},
		{bins.charge, modulePath + "/test/e2e/chargeserver"},
		{bins.bench, modulePath + "/bench/benchserver"},
	} {
		if out, err := exec.Command("go", "build", "-o", b.out, b.pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "httpbench: building %s: %v\n%s", b.pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// start runs argv and returns the first URL it prints on stdout or
// stderr (the chargeserver prints its URL; serve logs it).
func start(b *testing.B, argv ...string) string {
	b.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		pw.Close()
	})
	urls := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`http://[0-9.:]+/[a-z]*`)
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			if u := re.FindString(sc.Text()); u != "" && !sent {
				urls <- u
				sent = true
			}
		}
	}()
	select {
	case u := <-urls:
		return u
	case <-time.After(30 * time.Second):
		b.Fatalf("%s did not say where it listens", argv[0])
		return ""
	}
}

func chains(b *testing.B) []struct{ name, url string } {
	upstream := start(b, bins.charge, "-http", "127.0.0.1:0")
	flags := []string{"serve", "--listen", "127.0.0.1:0", "--log-level", "info", "--max-sessions", "64"}
	return []struct{ name, url string }{
		{"direct", upstream},
		{"relay", relay(b, upstream)},
		{"serve", start(b, append(append([]string{bins.proxy}, flags...), "--upstream", upstream)...)},
		{"serve-stdio", start(b, append(append([]string{bins.proxy}, flags...), "--", bins.bench)...)},
	}
}

// relay starts a bare HTTP reverse proxy to upstream, in this process:
// the cost of any HTTP hop, without interception. Answers are flushed as
// they come, as SSE needs.
func relay(b *testing.B, upstream string) string {
	target, err := url.Parse(upstream)
	if err != nil {
		b.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.URL.Path = target.Path
		},
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0), // see the note in call
		Transport:     &http.Transport{MaxIdleConnsPerHost: 64},
	}
	srv := httptest.NewServer(rp)
	b.Cleanup(srv.Close)
	return srv.URL + target.Path
}

// BenchmarkHTTP times tools/call round trips over Streamable HTTP through
// each chain.
func BenchmarkHTTP(b *testing.B) {
	for _, c := range chains(b) {
		b.Run(c.name+"/latency", func(b *testing.B) { latency(b, c.url) })
		b.Run(c.name+"/throughput", func(b *testing.B) { throughput(b, c.url, 16) })
	}
}

// A client speaks just enough Streamable HTTP for the benchmark: one
// session, POSTs, answers as JSON or SSE.
type client struct {
	url, session string
	hc           *http.Client
	next         atomic.Int64
	run          string // makes every run's arguments new
}

func newClient(b *testing.B, url string) *client {
	c := &client{url: url, run: strconv.FormatInt(time.Now().UnixNano(), 36),
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	b.Cleanup(c.hc.CloseIdleConnections)
	resp := c.mustPost(b, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"httpbench","version":"1"}}}`)
	c.session = resp.Header.Get("Mcp-Session-Id")
	b.Cleanup(func() {
		// End the session, and with it serve's upstream for it.
		req, _ := http.NewRequest("DELETE", c.url, nil)
		req.Header.Set("Mcp-Session-Id", c.session)
		if resp, err := c.hc.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp = c.mustPost(b, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for range 20 { // warm up
		if _, err := c.call(); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

func (c *client) mustPost(b *testing.B, body string) *http.Response {
	resp, err := c.post(body)
	if err != nil {
		b.Fatal(err)
	}
	return resp
}

func (c *client) post(body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(context.Background(), "POST", c.url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 && resp.StatusCode != 202 {
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("POST: %s %s", resp.Status, msg)
	}
	return resp, nil
}

// call makes one new charge and returns how long it took.
func (c *client) call() (time.Duration, error) {
	n := c.next.Add(1)
	body := `{"jsonrpc":"2.0","id":` + strconv.FormatInt(n, 10) + `,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"` + c.run + `","amount":` + strconv.FormatInt(n, 10) + `}}}`
	t0 := time.Now()
	resp, err := c.post(body)
	if err != nil {
		return 0, err
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		// httputil.ReverseProxy now and then loses the end of a chunked
		// SSE body whose answer came whole; the relay is only a baseline.
		err = nil
	}
	if err != nil || !bytes.Contains(out, []byte(`"id":`+strconv.FormatInt(n, 10)+`,"result"`)) {
		return 0, fmt.Errorf("call %d answered %q, %v", n, out, err)
	}
	return d, nil
}

func latency(b *testing.B, url string) {
	c := newClient(b, url)
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		d, err := c.call()
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, d)
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(times[(len(times)*99)/100].Nanoseconds()), "p99-ns")
}

func throughput(b *testing.B, url string, callers int) {
	c := newClient(b, url)
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	b.ResetTimer()
	t0 := time.Now()
	for range callers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if _, err := c.call(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "req/s")
}
