// Package demo shows the problem mcp-idempotent solves: a client calls
// charge_card, loses the answer, and retries; an agent retries five times;
// a client dispatches every call twice. Without the proxy the card is
// charged each time; with it, once.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
)

// A Conn carries newline-delimited JSON-RPC frames.
type Conn interface {
	ReadFrame() ([]byte, error)
	WriteFrame(frame []byte) error
	Close() error
}

// Proxy connects client to upstream until the client closes, the way the
// real proxy does. Nil means no proxy: the client talks to the server.
type Proxy func(ctx context.Context, client, upstream Conn) error

// A Result is what one run of a scenario observed.
type Result struct {
	Executions int    // times the server's charge_card ran
	Answer     string // the text of the last answer the client got
	Replayed   int    // answers marked replayed
	Execution  string // the execution id the last replay named
}

// A Scenario is what the client does, against a server that charges a
// card on each charge_card it runs.
type Scenario struct {
	// lose drops the first answer to a tools/call on its way to the
	// client: the connection broke, or the client gave up waiting.
	lose bool
	play func(ctx context.Context, c *client) (Result, error)
}

// The scenarios.
var (
	// LostAnswer: a call whose answer is lost, and the client's retry.
	LostAnswer = Scenario{lose: true, play: lostAnswer}
	// FiveRetries: five identical calls back to back, each answered: an
	// agent that lost track of its answers and retried.
	FiveRetries = Scenario{play: fiveRetries}
	// DoubleDispatch: two identical calls 3 ms apart under different
	// request ids: a client that dispatches every call twice.
	DoubleDispatch = Scenario{play: doubleDispatch}
)

// Run plays sc once: through proxy, or directly when proxy is nil.
func Run(ctx context.Context, proxy Proxy, sc Scenario) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	srv := &server{}
	srvIn, toSrv := io.Pipe()
	fromSrv, srvOut := io.Pipe()
	serverSide := stdio.NewConn(srvIn, srvOut, 0)
	upstream := stdio.NewConn(fromSrv, toSrv, 0)
	go srv.serve(serverSide)

	// The client's link drops the first answer to a tools/call: the
	// connection broke, or the client gave up waiting.
	cliIn, toCli := io.Pipe()
	fromCli, cliOut := io.Pipe()
	var conn Conn = stdio.NewConn(cliIn, cliOut, 0)
	if sc.lose {
		conn = &lossy{Conn: conn}
	}
	clientSide := stdio.NewConn(fromCli, toCli, 0)

	var wg sync.WaitGroup
	if proxy == nil {
		wg.Go(func() { relay(clientSide, upstream) })
		wg.Go(func() { relay(upstream, clientSide) })
	} else {
		wg.Go(func() {
			_ = proxy(ctx, clientSide, upstream)
			upstream.Close()
			toCli.Close()
		})
	}
	c := newClient(ctx, conn)
	res, err := c.handshake()
	if err == nil {
		res, err = sc.play(ctx, c)
	}
	conn.Close()
	cliIn.Close()
	wg.Wait()
	toSrv.Close()
	srvIn.Close()
	res.Executions = int(srv.charges.Load())
	return res, err
}

func relay(from, to Conn) {
	for {
		f, err := from.ReadFrame()
		if err != nil {
			to.Close()
			return
		}
		if to.WriteFrame(f) != nil {
			return
		}
	}
}

// lossy drops the first response that carries a tools/call result.
type lossy struct {
	Conn
	dropped atomic.Bool
}

func (l *lossy) ReadFrame() ([]byte, error) {
	for {
		f, err := l.Conn.ReadFrame()
		if err != nil {
			return nil, err
		}
		var m struct {
			Result struct {
				Content json.RawMessage `json:"content"`
			} `json:"result"`
		}
		if json.Unmarshal(f, &m) == nil && m.Result.Content != nil && l.dropped.CompareAndSwap(false, true) {
			continue
		}
		return f, nil
	}
}

// A client speaks to the server, with or without the proxy between.
type client struct {
	ctx     context.Context
	conn    Conn
	answers chan json.RawMessage
	nextID  int
}

func newClient(ctx context.Context, conn Conn) *client {
	c := &client{ctx: ctx, conn: conn, answers: make(chan json.RawMessage, 16)}
	go func() {
		for {
			f, err := conn.ReadFrame()
			if err != nil {
				close(c.answers)
				return
			}
			c.answers <- f
		}
	}()
	return c
}

// send sends a request with the next id, or a notification when the
// method starts with "notifications/".
func (c *client) send(method, params string) error {
	if strings.HasPrefix(method, "notifications/") {
		return c.conn.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"` + method + `"}`))
	}
	c.nextID++
	return c.conn.WriteFrame(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, c.nextID, method, params))
}

func (c *client) await(timeout time.Duration) (json.RawMessage, error) {
	select {
	case a, ok := <-c.answers:
		if !ok {
			return nil, errors.New("connection closed")
		}
		return a, nil
	case <-time.After(timeout):
		return nil, errTimeout
	case <-c.ctx.Done():
		return nil, c.ctx.Err()
	}
}

func (c *client) handshake() (Result, error) {
	if err := c.send("initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"demo-client","version":"1"}}`); err != nil {
		return Result{}, err
	}
	if _, err := c.await(5 * time.Second); err != nil {
		return Result{}, fmt.Errorf("initialize: %w", err)
	}
	return Result{}, c.send("notifications/initialized", "")
}

// charge is the call every scenario makes.
const charge = `{"name":"charge_card","arguments":{"card":"4242","amount_cents":5000}}`

// answered reads n answers to charge_card and adds them to res.
func (c *client) answered(res *Result, n int) error {
	for range n {
		raw, err := c.await(5 * time.Second)
		if err != nil {
			return err
		}
		var resp struct {
			Result struct {
				Content []struct{ Text string } `json:"content"`
				Meta    struct {
					Replayed  bool `json:"mcp-idempotent/replayed"`
					Execution struct {
						ID string `json:"id"`
					} `json:"mcp-idempotent/execution"`
				} `json:"_meta"`
			} `json:"result"`
		}
		if err := json.Unmarshal(raw, &resp); err != nil || len(resp.Result.Content) == 0 {
			return fmt.Errorf("unexpected answer %s", raw)
		}
		res.Answer = resp.Result.Content[0].Text
		if resp.Result.Meta.Replayed {
			res.Replayed++
			res.Execution = resp.Result.Meta.Execution.ID
		}
	}
	return nil
}

func lostAnswer(_ context.Context, c *client) (Result, error) {
	var res Result
	if err := c.send("tools/call", charge); err != nil {
		return res, err
	}
	if _, err := c.await(500 * time.Millisecond); !errors.Is(err, errTimeout) {
		return res, fmt.Errorf("the first answer should have been lost, got %v", err)
	}
	// Timed out: the client cannot tell "never ran" from "answer lost",
	// so it sends the same call again.
	if err := c.send("tools/call", charge); err != nil {
		return res, err
	}
	if err := c.answered(&res, 1); err != nil {
		return res, fmt.Errorf("retry: %w", err)
	}
	return res, nil
}

func fiveRetries(_ context.Context, c *client) (Result, error) {
	var res Result
	for i := range 5 {
		if err := c.send("tools/call", charge); err != nil {
			return res, err
		}
		if err := c.answered(&res, 1); err != nil {
			return res, fmt.Errorf("call %d: %w", i+1, err)
		}
	}
	return res, nil
}

func doubleDispatch(_ context.Context, c *client) (Result, error) {
	var res Result
	if err := c.send("tools/call", charge); err != nil {
		return res, err
	}
	time.Sleep(3 * time.Millisecond)
	if err := c.send("tools/call", charge); err != nil {
		return res, err
	}
	if err := c.answered(&res, 2); err != nil {
		return res, err
	}
	return res, nil
}

var errTimeout = errors.New("timed out")

// server is a minimal MCP server with one side-effecting tool.
type server struct {
	charges atomic.Int32
}

func (s *server) serve(c Conn) {
	for {
		f, err := c.ReadFrame()
		if err != nil {
			c.Close()
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(f, &req) != nil || req.ID == nil {
			continue
		}
		var result string
		switch req.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"demo-bank","version":"1"}}`
		case "tools/list":
			result = `{"tools":[{"name":"charge_card","description":"Charges a card.","inputSchema":{"type":"object","properties":{"card":{"type":"string"},"amount_cents":{"type":"integer"}}}}]}`
		case "tools/call":
			n := s.charges.Add(1)
			result = fmt.Sprintf(`{"content":[{"type":"text","text":"charged $50.00 to card 4242 (charge ch_%d)"}]}`, n)
		default:
			result = `{}`
		}
		_ = c.WriteFrame([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":` + result + `}`))
	}
}
