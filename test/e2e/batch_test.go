package e2e

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"
)

// TestStdioBatchOfASessionVersion: the go-sdk server exits on a batch in
// a session of protocol 2025-06-18 or later, which has no batches, and
// every call under way on it would be outcome unknown. Through the proxy
// such a batch is refused, and the same server answers what comes next;
// in a session of 2025-03-26 the batch is answered whole.
func TestStdioBatchOfASessionVersion(t *testing.T) {
	if direct {
		t.Skip("about the proxy's refusal")
	}
	for _, tc := range []struct{ version, want string }{
		{"2025-06-18", `"message":"mcp-idempotent: a session of protocol 2025-06-18 takes one message per line`},
		{"2025-03-26", `[{"jsonrpc":"2.0","id":2,"result":{}},{"jsonrpc":"2.0","id":3,"result":{`},
	} {
		t.Run(tc.version, func(t *testing.T) {
			inR, inW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			outR, outW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd := proxied(t, chargeServer()...)
			cmd.Stdin, cmd.Stdout = inR, outW
			stderr := new(syncBuffer)
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			inR.Close()
			outW.Close()
			defer func() {
				inW.Close()
				if err := cmd.Wait(); err != nil {
					t.Errorf("the proxy exited with %v; stderr:\n%s", err, stderr)
				}
				outR.Close()
			}()
			lines := bufio.NewReader(outR)
			exchange := func(frame string) string {
				t.Helper()
				if _, err := inW.WriteString(frame + "\n"); err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(frame, `{"jsonrpc":"2.0","method"`) {
					return "" // a notification: no answer
				}
				outR.SetReadDeadline(time.Now().Add(30 * time.Second))
				line, err := lines.ReadString('\n')
				if err != nil {
					t.Fatalf("reading the answer to %s: %v; stderr:\n%s", frame, err, stderr)
				}
				return line
			}
			if got := exchange(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + tc.version + `","capabilities":{},"clientInfo":{"name":"batch","version":"1"}}}`); !strings.Contains(got, `"protocolVersion":"`+tc.version+`"`) {
				t.Fatalf("initialize answered %s; want protocol %s", got, tc.version)
			}
			exchange(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			if got := exchange(`[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"tools/list"}]`); !strings.Contains(got, tc.want) {
				t.Fatalf("the batch was answered %s; want %s", got, tc.want)
			}
			got := exchange(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242","amount":5}}}`)
			if !strings.Contains(got, `"id":4,"result"`) || strings.Contains(got, `"isError":true`) {
				t.Fatalf("the call after the batch was answered %s; want a result", got)
			}
			if strings.Contains(stderr.String(), "starting it again") {
				t.Fatalf("the upstream exited; stderr:\n%s", stderr)
			}
		})
	}
}
