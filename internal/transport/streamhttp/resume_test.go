package streamhttp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// cutTransport breaks the SSE answer to the first POST holding cutAt right
// after the first event that contains "notifications/progress", as a
// dropped connection would.
type cutTransport struct {
	cutAt string
	done  atomic.Bool
}

func (t *cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost || !bytes.Contains(body, []byte(t.cutAt)) || t.done.Swap(true) {
		return resp, err
	}
	resp.Body = &cutBody{rc: resp.Body}
	return resp, nil
}

type cutBody struct {
	rc   io.ReadCloser
	seen []byte
	cut  bool
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.cut {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := b.rc.Read(p)
	before := len(b.seen)
	b.seen = append(b.seen, p[:n]...)
	if i := bytes.Index(b.seen, []byte("notifications/progress")); i >= 0 {
		if j := bytes.Index(b.seen[i:], []byte("\n\n")); j >= 0 {
			b.cut = true
			b.rc.Close()
			return i + j + 2 - before, nil
		}
	}
	return n, err
}

func (b *cutBody) Close() error { return b.rc.Close() }

// TestResume cuts the SSE stream of a tool call in the middle: the Client
// resumes it with Last-Event-ID and delivers the one result; the tool ran
// once.
func TestResume(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	var runs atomic.Int32
	release := make(chan struct{})
	mcp.AddTool(server, &mcp.Tool{Name: "long"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1})
		<-release
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "finished"}}}, nil, nil
	})
	rec := &recorder{next: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})}
	ts := httptest.NewServer(rec)
	defer ts.Close()
	c, err := Dial(context.Background(), ts.URL, Options{
		HTTPClient: &http.Client{Transport: &cutTransport{cutAt: `"long"`}},
		Logger:     slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	handshake(t, c)

	write(t, c, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"long","_meta":{"progressToken":"p"}}}`)
	if m := read(t, c); m.Method != "notifications/progress" {
		t.Fatalf("got %s, want the progress notification", m.Raw)
	}
	close(release)
	resp, _ := readResponse(t, c, "3")
	if resp.Error != nil || !strings.Contains(string(resp.Result), "finished") {
		t.Errorf("result = %s", resp.Raw)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times", n)
	}
	var resumed bool
	for _, g := range rec.requests(http.MethodGet, "") {
		if g.header.Get(headerLastEventID) != "" {
			resumed = true
		}
	}
	if !resumed {
		t.Error("no GET with Last-Event-ID")
	}
}

// TestStreamEndsWithoutAnswer checks that a request whose SSE answer ends
// early, with no event id to resume from, is answered with an error.
func TestStreamEndsWithoutAnswer(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n")
	}))
	defer ts.Close()
	c := dial(t, ts.URL)
	write(t, c, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x"}}`)
	if m := read(t, c); m.Method != "notifications/message" {
		t.Errorf("got %s, want the notification", m.Raw)
	}
	if na := readNoAnswer(t, c); string(na.ID) != "4" || na.NotSent || na.Status != 200 {
		t.Errorf("got %+v, want id 4 unanswered after HTTP 200", *na)
	}
}

// TestServerRequest answers a request the server makes during a tool call
// (roots/list): the answer is POSTed like any frame.
func TestServerRequest(t *testing.T) {
	server, _, ts := newServer(t, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "roots"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%d roots", len(res.Roots))}}}, nil, nil
	})
	c := dial(t, ts.URL)
	write(t, c, strings.Replace(initialize, `"capabilities":{}`, `"capabilities":{"roots":{}}`, 1))
	readResponse(t, c, "1")
	write(t, c, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	write(t, c, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"roots"}}`)
	m := read(t, c)
	if m.Method != "roots/list" || !m.IsRequest() {
		t.Fatalf("got %s, want a roots/list request", m.Raw)
	}
	write(t, c, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"roots":[{"uri":"file:///tmp","name":"tmp"}]}}`)
	resp, _ := readResponse(t, c, "5")
	if !strings.Contains(string(resp.Result), "1 roots") {
		t.Errorf("result = %s", resp.Raw)
	}
}

// TestCloseDuringCall checks that Close does not wait for a call in flight,
// ends the session, and makes ReadFrame return io.EOF.
func TestCloseDuringCall(t *testing.T) {
	server, rec, ts := newServer(t, nil)
	started, unblock := make(chan struct{}), make(chan struct{})
	mcp.AddTool(server, &mcp.Tool{Name: "block"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		close(started)
		<-unblock
		return &mcp.CallToolResult{}, nil, nil
	})
	c := dial(t, ts.URL)
	handshake(t, c)
	write(t, c, `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"block"}}`)
	<-started
	// The go-sdk server answers DELETE once the session's handlers return:
	// let the tool finish when the DELETE arrives.
	rec.mu.Lock()
	rec.hook = func(r *http.Request) {
		if r.Method == http.MethodDelete {
			close(unblock)
		}
	}
	rec.mu.Unlock()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for {
		f, err := c.ReadFrame()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("ReadFrame: %v", err)
		}
		t.Logf("frame before EOF: %s", f)
	}
	if len(rec.requests(http.MethodDelete, "")) != 1 {
		t.Error("no DELETE")
	}
}
