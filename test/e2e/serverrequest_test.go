package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestAttachedCallerOutlivesTheAskedSession: under serve --scope actor, a
// go-sdk server asks the first caller's client a question (elicitation)
// during a call that a second client of the actor attached to. The first
// session ends (DELETE) before its client answers: the server is told no
// answer can come, finishes the call, and the attached caller gets its
// answer rather than waiting on a question nobody can answer. It is not
// asked again, and the tool ran once.
func TestAttachedCallerOutlivesTheAskedSession(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	var runs atomic.Int32
	srv := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "confirm_charge", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
			runs.Add(1)
			text := "no answer"
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "charge?", RequestedSchema: map[string]any{"type": "object"}})
			if err == nil {
				text = "answer: " + res.Action
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	s := startServe(t, "--scope", "actor", "--upstream", hs.URL)

	asked, gone := make(chan struct{}, 1), make(chan struct{})
	defer close(gone) // the first client's user, who never answers
	a := connectHTTP(t, ctx, s, s.url, "2025-11-25", &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- struct{}{}
			<-gone
			return nil, context.Canceled
		}}, nil)
	var bAsked atomic.Int32
	attached := make(chan struct{}, 1)
	b := connectHTTP(t, ctx, s, s.url, "2025-11-25", &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			bAsked.Add(1)
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case attached <- struct{}{}:
			default:
			}
		}}, nil)

	go a.CallTool(ctx, &mcp.CallToolParams{Name: "confirm_charge", Arguments: map[string]any{}})
	select {
	case <-asked:
	case <-ctx.Done():
		t.Fatal("the first client was never asked")
	}
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "confirm_charge", Arguments: map[string]any{}}
		params.SetProgressToken("b")
		res, err := b.CallTool(ctx, params)
		done <- outcome{res, err}
	}()
	select {
	case <-attached: // the proxy says so as the caller attaches
	case <-ctx.Done():
		t.Fatal("the second caller was never told it is attached")
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, s.url, nil)
	req.Header.Set("Mcp-Session-Id", a.ID())
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	res, err := httpClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()

	o := <-done
	if o.err != nil {
		t.Fatalf("the attached caller got %v; want the call's answer once the asked session ended", o.err)
	}
	if got := firstText(o.res); !strings.HasPrefix(got, "no answer") {
		t.Fatalf("the attached caller got %q; want the server's answer without the question's", got)
	}
	if n, m := runs.Load(), bAsked.Load(); n != 1 || m != 0 {
		t.Fatalf("the tool ran %d times and the second client was asked %d times; want 1 and 0", n, m)
	}
}
