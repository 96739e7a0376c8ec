package streamhttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/streamhttp"
)

func ExampleDial() {
	server := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "greet"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Name string `json:"name"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + in.Name}}}, nil, nil
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	defer ts.Close()

	c, err := streamhttp.Dial(context.Background(), ts.URL, streamhttp.Options{})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	for _, f := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"example","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"greet","arguments":{"name":"world"},"_meta":{"mcp-idempotent/execution-id":"01JEXAMPLE"}}}`,
	} {
		if err := c.WriteFrame([]byte(f)); err != nil {
			panic(err)
		}
		if strings.Contains(f, `"id"`) {
			frame, err := c.ReadFrame()
			if err != nil {
				panic(err)
			}
			if strings.Contains(string(frame), `"id":2`) {
				fmt.Println(string(frame))
			}
		}
	}
	// Output:
	// {"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hello world"}]}}
}

// A request of the 2026-07-28 protocol needs no handshake: its _meta says
// which version it speaks, and the Client sends it on its own, with the
// headers that mirror it (MCP-Protocol-Version, Mcp-Method, Mcp-Name), to a
// server that keeps no session.
func ExampleDial_stateless() {
	server := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "greet"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Name string `json:"name"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + in.Name}}}, nil, nil
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	defer ts.Close()

	c, err := streamhttp.Dial(context.Background(), ts.URL, streamhttp.Options{})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	err = c.WriteFrame([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet","arguments":{"name":"world"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	if err != nil {
		panic(err)
	}
	frame, err := c.ReadFrame()
	if err != nil {
		panic(err)
	}
	fmt.Println(string(frame))
	// Output:
	// {"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"upstream","version":"1"}},"content":[{"type":"text","text":"hello world"}],"resultType":"complete"}}
}

// TestHeadersNotLogged checks that the configured header values stay out
// of the log, whatever goes wrong.
func TestHeadersNotLogged(t *testing.T) {
	var log bytes.Buffer
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer ts.Close()
	c, err := streamhttp.Dial(context.Background(), ts.URL, streamhttp.Options{
		Header: http.Header{"Authorization": {"Bearer s3cr3t"}},
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	c.WriteFrame([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if _, err := c.ReadFrame(); !errors.As(err, new(*jsonrpc.NoAnswer)) {
		t.Fatalf("ReadFrame = %v; want the ping's account as unanswered", err)
	}
	c.Close()
	if log.Len() == 0 {
		t.Error("nothing logged")
	}
	if strings.Contains(log.String(), "s3cr3t") {
		t.Errorf("the log holds a header value:\n%s", log.String())
	}
}
