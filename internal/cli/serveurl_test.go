package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestServeLogsAURLThatAnswers: the URL serve logs is one a client on
// this host can paste, the Host check passing it, whatever --listen
// names; and the listen address it logs is the one given, with the port
// the OS chose.
func TestServeLogsAURLThatAnswers(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("s3cret alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "[::1]:0")
	ipv6 := err == nil
	if ipv6 {
		ln.Close()
	}
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "127.0.0.1:0", "[::1]:0", "localhost:0"} {
		t.Run(listen, func(t *testing.T) {
			if strings.HasPrefix(listen, "[") && !ipv6 {
				t.Skip("no IPv6 loopback here")
			}
			ctx, cancel := context.WithCancel(t.Context())
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			go func() {
				// The token keeps the upstream from starting: a request
				// the Host check passes gets 401, one it refuses 403.
				done <- Run(ctx, []string{"serve", "--listen", listen, "--auth-token-file", tokens, "--", "/bin/cat"}, strings.NewReader(""), io.Discard, pw)
				pw.Close()
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("serve returned %v after its context ended; want nil", err)
				}
			}()
			u, logged := servedAddrs(t, pr)
			parsed, err := url.Parse(u)
			if err != nil {
				t.Fatalf("logged url %q: %v", u, err)
			}
			host, port, _ := net.SplitHostPort(logged)
			if wantHost, _, _ := net.SplitHostPort(listen); host != wantHost || port == "0" || port != parsed.Port() {
				t.Errorf("logged listen=%s url=%s; want the host given (%q) and the port of the URL, not 0", logged, u, wantHost)
			}
			resp, err := http.Post(u, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`))
			if err != nil {
				t.Fatalf("POST to the logged url %s: %v", u, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("POST to the logged url %s without a token: %s; want 401", u, resp.Status)
			}
		})
	}
}

// servedAddrs reads serve's log from r until it says where it listens,
// returns the url and listen it logs, and drains the rest.
func servedAddrs(t *testing.T, r io.Reader) (u, listen string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	re := regexp.MustCompile(`url=(\S+) listen=(\S+)`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			go io.Copy(io.Discard, r)
			return m[1], m[2]
		}
	}
	t.Fatal("serve did not log where it listens")
	return "", ""
}
