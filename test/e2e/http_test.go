package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// httpChargeServer starts the charge server on Streamable HTTP on a free
// loopback port, with extra flags, and returns its URL.
func httpChargeServer(t *testing.T, flags ...string) string {
	t.Helper()
	url, _ := httpChargeServerAt(t, "127.0.0.1:0", flags...)
	return url
}

// httpChargeServerAt starts the charge server on Streamable HTTP at addr,
// with extra flags, and returns its URL and a function that stops it.
func httpChargeServerAt(t *testing.T, addr string, flags ...string) (string, func()) {
	t.Helper()
	cmd := exec.Command(chargeBin, append([]string{"-http", addr}, flags...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	t.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the HTTP charge server did not say where it listens: %v", err)
	}
	return strings.TrimSpace(line), stop
}

// chargeFiveTimesOnce makes five identical charges through p and checks
// that the upstream ran one: the later answers are the first, replayed.
func chargeFiveTimesOnce(t *testing.T, ctx context.Context, p *peer) {
	t.Helper()
	var first string
	for i := range 5 {
		res := charge(t, ctx, p, "4242", 100)
		if i == 0 {
			first = firstText(res)
		} else if firstText(res) != first || !replayed(res) {
			t.Fatalf("call %d got %q (replayed %v); want the first answer %q replayed", i+1, firstText(res), replayed(res), first)
		}
	}
	if n := executions(t, ctx, p); n != 1 {
		t.Fatalf("the upstream ran charge_card %d times for 5 identical calls; want 1", n)
	}
}

// TestHTTPUpstream: the proxy in front of a Streamable HTTP server (the
// go-sdk's), driven over stdio by the go-sdk client: retries run once.
func TestHTTPUpstream(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	url := httpChargeServer(t)
	ctx := testContext(t)
	p := connect(t, ctx, proxiedWith(t, []string{"--upstream", url, "--upstream-header", "Authorization: Bearer t0ken"}))
	chargeFiveTimesOnce(t, ctx, p)
	if strings.Contains(p.stderr.String(), "t0ken") {
		t.Fatal("the credential appeared in the proxy's log")
	}
}

// TestHTTPSessionExpiry: the upstream server restarts and forgets the
// session. The proxy's next request gets 404; the proxy starts a new
// session, replaying the client's handshake, and the client carries on
// without reconnecting.
func TestHTTPSessionExpiry(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	url, stop := httpChargeServerAt(t, addr)
	ctx := testContext(t)
	p := connect(t, ctx, proxiedWith(t, []string{"--upstream", url}))
	charge(t, ctx, p, "4242", 1)

	stop()
	httpChargeServerAt(t, addr) // a new server: the old session is unknown to it
	// The first request after the restart meets the 404; it did not run.
	if _, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 2)}); err == nil || !strings.Contains(err.Error(), "session expired") {
		t.Fatalf("the call that met the expired session got %v; want an error saying the session expired", err)
	}
	if err := p.stderr.waitFor(ctx, "the upstream was started again"); err != nil {
		t.Fatalf("the proxy did not start a new session: %v", err)
	}
	if got := firstText(charge(t, ctx, p, "4242", 3)); !strings.Contains(got, "charge #1") {
		t.Fatalf("the next call got %q; want it to run in the new session", got)
	}
}

// TestHTTPUpstreamEras runs the go-sdk v1.8.0 client, which speaks
// 2026-07-28 first (it sends server/discover before anything else), through
// the proxy to an HTTP upstream of each era. The stateful go-sdk server
// lists no 2026-07-28 in its discover result, so the client falls back to
// initialize and the session of 2025-11-25, the era TestHTTPUpstream runs
// in; the stateless one takes the 2026-07-28 requests, whose HTTP headers
// it checks against their bodies. Either way, retries run once.
func TestHTTPUpstreamEras(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	for _, tc := range []struct {
		name        string
		serverFlags []string
		version     string // the version the client ends up speaking
	}{
		{"2025-11-25", nil, "2025-11-25"},
		{"2026-07-28", []string{"-stateless"}, "2026-07-28"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := httpChargeServer(t, tc.serverFlags...)
			ctx := testContext(t)
			p := connect(t, ctx, proxiedWith(t, []string{"--upstream", url}))
			if got := p.InitializeResult().ProtocolVersion; got != tc.version {
				t.Fatalf("the client speaks %s; want %s", got, tc.version)
			}
			handshake := strings.Contains(p.frames.String(), `"method":"initialize"`)
			if handshake != (tc.version < "2026-07-28") {
				t.Errorf("the client sent initialize: %v; want it only in the 2025 era", handshake)
			}
			tools, err := p.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			listed := false
			for _, tool := range tools.Tools {
				listed = listed || tool.Name == "charge_card"
			}
			if !listed {
				t.Fatalf("tools/list has no charge_card")
			}
			chargeFiveTimesOnce(t, ctx, p)
		})
	}
}

// refusingGateway starts an HTTP gateway in front of the MCP server at
// upstream that answers the first POST of a charge_card call itself, with
// status and Retry-After retryAfter ("" for none), as a load balancer or
// rate limiter in front of a server does, and forwards everything else.
// It returns the gateway's URL and the count of calls it refused.
func refusingGateway(t *testing.T, upstream string, status int, retryAfter string) (string, *atomic.Int32) {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.Out.URL.Scheme, r.Out.URL.Host, r.Out.URL.Path = target.Scheme, target.Host, target.Path
		r.Out.Host = target.Host
	}}
	var refused atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"tools/call"`)) && bytes.Contains(body, []byte(`"charge_card"`)) && refused.CompareAndSwap(0, 1) {
				if retryAfter != "" {
					w.Header().Set("Retry-After", retryAfter)
				}
				http.Error(w, http.StatusText(status), status)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + target.Path, &refused
}

// TestHTTPStatusRetries: an HTTP status from the upstream's side feeds the
// retry rules. A 429 proves the charge did not run, so even this side
// effect is sent again, no sooner than the Retry-After asks; a 503 proves
// nothing (a gateway may send it after the server took the request), so
// the side effect is not sent again and its outcome is unknown.
func TestHTTPStatusRetries(t *testing.T) {
	needProxy(t)
	const rule = "tools:\n  charge_card:\n    retry: {max_attempts: 3, base: 10ms, cap: 50ms}\n"
	for _, tc := range []struct {
		status     int
		retryAfter string
		resent     bool
	}{
		{http.StatusTooManyRequests, "1", true},
		{http.StatusServiceUnavailable, "", false},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			gw, refused := refusingGateway(t, httpChargeServer(t), tc.status, tc.retryAfter)
			ctx := testContext(t)
			p := connect(t, ctx, proxiedWith(t, append(withPolicy(t, rule), "--upstream", gw)))
			start := time.Now()
			res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
			took := time.Since(start)
			if refused.Load() != 1 {
				t.Fatalf("the gateway refused %d calls; want 1", refused.Load())
			}
			if !tc.resent {
				// The 503 may have come after the charge ran: its outcome is
				// unknown, and the same call sent again is not run blindly.
				for i := range 2 {
					if err != nil || !res.IsError || !strings.HasPrefix(firstText(res), "Outcome unknown:") {
						t.Fatalf("call %d got %v, %v; want outcome unknown", i+1, res, err)
					}
					res, err = p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
				}
				if n := executions(t, ctx, p); n != 0 {
					t.Fatalf("the server charged %d times; want 0", n)
				}
				return
			}
			if err != nil || res.IsError || !strings.Contains(firstText(res), "charge #1") {
				t.Fatalf("got %v, %v; want the second attempt's charge", res, err)
			}
			if took < time.Second {
				t.Fatalf("answered after %v; the Retry-After asked for 1s before the second attempt", took)
			}
			if n := executions(t, ctx, p); n != 1 {
				t.Fatalf("the server charged %d times; want 1", n)
			}
			if err := p.stderr.waitFor(ctx, "why=\"HTTP 429\""); err != nil {
				t.Fatalf("the proxy did not log the attempt: %v", err)
			}
		})
	}
}
