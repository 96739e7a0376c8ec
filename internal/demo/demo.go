// Package demo shows the problem mcp-idempotent solves, in one run: a
// client calls charge_card, loses the answer, and retries. Without the proxy
// the card is charged twice; with it, once.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// A Result is what one run of the scenario observed.
type Result struct {
	Executions int    // times the server's charge_card ran
	Answer     string // the text of the answer the retry got
	Replayed   bool   // the retry's answer was marked replayed
	Execution  string // the execution id the replay named
}

// Run plays the scenario once: through proxy, or directly when proxy is nil.
func Run(ctx context.Context, proxy Proxy) (Result, error) {
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
	client := &lossy{Conn: stdio.NewConn(cliIn, cliOut, 0)}
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
	res, err := script(ctx, client)
	client.Close()
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

// script is the client: handshake, a call whose answer is lost, a retry.
func script(ctx context.Context, c Conn) (Result, error) {
	answers := make(chan json.RawMessage, 8)
	go func() {
		for {
			f, err := c.ReadFrame()
			if err != nil {
				close(answers)
				return
			}
			answers <- f
		}
	}()
	send := func(s string) error { return c.WriteFrame([]byte(s)) }
	await := func(timeout time.Duration) (json.RawMessage, error) {
		select {
		case a, ok := <-answers:
			if !ok {
				return nil, errors.New("connection closed")
			}
			return a, nil
		case <-time.After(timeout):
			return nil, errTimeout
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}

	if err := send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"demo-client","version":"1"}}}`); err != nil {
		return Result{}, err
	}
	if _, err := await(5 * time.Second); err != nil {
		return Result{}, fmt.Errorf("initialize: %w", err)
	}
	if err := send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		return Result{}, err
	}
	const call = `"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242","amount_cents":5000}}}`
	if err := send(`{"jsonrpc":"2.0","id":2,` + call); err != nil {
		return Result{}, err
	}
	if _, err := await(500 * time.Millisecond); !errors.Is(err, errTimeout) {
		return Result{}, fmt.Errorf("the first answer should have been lost, got %v", err)
	}
	// Timed out: the client cannot tell "never ran" from "answer lost",
	// so it sends the same call again.
	if err := send(`{"jsonrpc":"2.0","id":3,` + call); err != nil {
		return Result{}, err
	}
	raw, err := await(5 * time.Second)
	if err != nil {
		return Result{}, fmt.Errorf("retry: %w", err)
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
		return Result{}, fmt.Errorf("retry: unexpected answer %s", raw)
	}
	return Result{
		Answer:    resp.Result.Content[0].Text,
		Replayed:  resp.Result.Meta.Replayed,
		Execution: resp.Result.Meta.Execution.ID,
	}, nil
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
