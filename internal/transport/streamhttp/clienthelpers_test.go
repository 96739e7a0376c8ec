package streamhttp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// recorder wraps a handler and keeps the requests it saw.
type recorder struct {
	next http.Handler

	mu   sync.Mutex
	seen []seenRequest
	// fail, when set, answers the next POST carrying a request with this
	// method instead of the handler.
	fail func(w http.ResponseWriter, body string) bool
	// hook, when set, sees each request first.
	hook func(*http.Request)
	// got receives the method of each request, for tests that wait for one.
	got chan string
}

type seenRequest struct {
	method string
	header http.Header
	body   string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(strings.NewReader(string(body)))
	r.mu.Lock()
	r.seen = append(r.seen, seenRequest{req.Method, req.Header.Clone(), string(body)})
	fail, hook := r.fail, r.hook
	r.mu.Unlock()
	if hook != nil {
		hook(req)
	}
	if r.got != nil {
		select {
		case r.got <- req.Method:
		default:
		}
	}
	if fail != nil && req.Method == http.MethodPost && fail(w, string(body)) {
		return
	}
	r.next.ServeHTTP(w, req)
}

// requests returns the requests seen whose body contains substr.
func (r *recorder) requests(method, substr string) []seenRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []seenRequest
	for _, s := range r.seen {
		if s.method == method && strings.Contains(s.body, substr) {
			out = append(out, s)
		}
	}
	return out
}

type progressArgs struct {
	Steps int `json:"steps"`
}

// newServer starts a go-sdk server behind a recorder.
func newServer(t *testing.T, opts *mcp.StreamableHTTPOptions) (*mcp.Server, *recorder, *httptest.Server) {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "progress"}, func(ctx context.Context, req *mcp.CallToolRequest, in progressArgs) (*mcp.CallToolResult, any, error) {
		for i := range in.Steps {
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(),
				Progress:      float64(i + 1),
				Total:         float64(in.Steps),
			})
			if err != nil {
				return nil, nil, err
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	rec := &recorder{next: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, opts)}
	ts := httptest.NewServer(rec)
	t.Cleanup(ts.Close)
	return server, rec, ts
}

func dial(t *testing.T, url string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), url, Options{Header: http.Header{"Authorization": {"Bearer secret"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func write(t *testing.T, c *Client, frame string) {
	t.Helper()
	if err := c.WriteFrame([]byte(frame)); err != nil {
		t.Fatalf("WriteFrame(%s): %v", frame, err)
	}
}

func read(t *testing.T, c *Client) *jsonrpc.Message {
	t.Helper()
	f, err := c.ReadFrame()
	if err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	if strings.ContainsAny(string(f), "\r\n") {
		t.Errorf("frame holds a newline: %q", f)
	}
	m, err := jsonrpc.Decode(f)
	if err != nil {
		t.Fatalf("decoding %s: %v", f, err)
	}
	return m
}

// readNoAnswer reads the Client's own account of a request the server did
// not answer, which must come next.
func readNoAnswer(t *testing.T, c *Client) *jsonrpc.NoAnswer {
	t.Helper()
	f, err := c.ReadFrame()
	na, ok := errors.AsType[*jsonrpc.NoAnswer](err)
	if !ok {
		t.Fatalf("ReadFrame = %s, %v; want a *jsonrpc.NoAnswer", f, err)
	}
	return na
}

// readResponse reads frames until the response with id, returning it and
// the frames before it.
func readResponse(t *testing.T, c *Client, id string) (*jsonrpc.Message, []*jsonrpc.Message) {
	t.Helper()
	var before []*jsonrpc.Message
	for {
		m := read(t, c)
		if m.IsResponse() && string(m.ID) == id {
			return m, before
		}
		before = append(before, m)
	}
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}`

// handshake initializes the session and returns the initialize result.
func handshake(t *testing.T, c *Client) *jsonrpc.Message {
	t.Helper()
	write(t, c, initialize)
	resp, _ := readResponse(t, c, "1")
	if resp.Error != nil {
		t.Fatalf("initialize failed: %s", resp.Raw)
	}
	write(t, c, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return resp
}

// statelessMeta is the _meta of a 2026-07-28 request: the go-sdk server
// wants the client's capabilities with the version (SEP-2575).
const statelessMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// logEvents is a slog.Handler that sends the message of each record to a
// channel, for tests that wait for something the Client does not return.
type logEvents chan string

// dialLogged dials url with a Client whose log records come on events;
// the Client is closed when the test ends.
func dialLogged(t *testing.T, url string) (*Client, logEvents) {
	t.Helper()
	events := make(logEvents, 64)
	c, err := Dial(context.Background(), url, Options{Logger: slog.New(events)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, events
}

func (h logEvents) Enabled(context.Context, slog.Level) bool { return true }
func (h logEvents) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h logEvents) WithGroup(string) slog.Handler            { return h }
func (h logEvents) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Message:
	default: // a full channel must not stop the Client
	}
	return nil
}
