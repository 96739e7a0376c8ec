// Command benchserver is a minimal MCP server over stdio, used only as the
// upstream of the latency benchmark in package bench.
//
// It is written with encoding/json and bufio rather than an SDK so that its
// own cost per call is small and the same for every chain the benchmark
// measures: whatever differs between "direct", "relay" and "proxy" is the
// cost of what sits in between.
//
// Frames are newline-delimited JSON-RPC 2.0 messages. It answers initialize,
// tools/list (one tool, charge_card, without annotations, so a proxy treats it
// as side-effecting), tools/call and ping; notifications and responses are
// ignored. Every tools/call result ends with "#N", N being the number of
// tools/call requests this process has executed, so a client can tell how many
// calls reached the upstream.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

type request struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type callResult struct {
	Content []textContent `json:"content"`
	IsError bool          `json:"isError"`
}

// toolsList is constant; it is marshalled once.
var toolsList = json.RawMessage(`{"tools":[{"name":"charge_card","description":"Charge a card (benchmark stand-in; charges nothing).","inputSchema":{"type":"object","properties":{"card":{"type":"string"},"amount":{"type":"number"}},"required":["card","amount"]}}]}`)

func main() {
	if err := serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchserver:", err)
		os.Exit(1)
	}
}

func serve(in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriterSize(out, 64<<10)
	calls := 0
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			resp, ok := handle(line, &calls)
			if ok {
				b, merr := json.Marshal(resp)
				if merr != nil {
					return fmt.Errorf("marshalling response: %w", merr)
				}
				b = append(b, '\n')
				if _, werr := w.Write(b); werr != nil {
					return fmt.Errorf("writing response: %w", werr)
				}
				// One flush per frame: the client waits for each answer.
				if ferr := w.Flush(); ferr != nil {
					return fmt.Errorf("writing response: %w", ferr)
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading request: %w", err)
		}
	}
}

// handle returns the response to one frame, and false when the frame needs
// none (notifications, responses, blank lines).
func handle(line []byte, calls *int) (response, bool) {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		if len(bytes.TrimSpace(line)) == 0 {
			return response{}, false
		}
		return response{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: -32700, Message: "parse error"}}, true
	}
	if len(req.ID) == 0 || req.Method == "" {
		return response{}, false // notification or response
	}
	resp := response{JSONRPC: "2.0", ID: req.ID}
	switch req.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(req.Params, &p)
		if p.ProtocolVersion == "" {
			p.ProtocolVersion = "2025-06-18"
		}
		resp.Result = map[string]any{
			"protocolVersion": p.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]any{"name": "benchserver", "version": "0.0.0"},
		}
	case "ping":
		resp.Result = struct{}{}
	case "tools/list":
		resp.Result = toolsList
	case "tools/call":
		var p struct {
			Name      string `json:"name"`
			Arguments struct {
				Card   string      `json:"card"`
				Amount json.Number `json:"amount"`
			} `json:"arguments"`
		}
		if err := json.Unmarshal(req.Params, &p); err != nil {
			resp.Error = &rpcError{Code: -32602, Message: "invalid params"}
			break
		}
		if p.Name != "charge_card" {
			resp.Error = &rpcError{Code: -32602, Message: "unknown tool " + strconv.Quote(p.Name)}
			break
		}
		*calls++
		text := "charged " + p.Arguments.Card + " " + string(p.Arguments.Amount) + " #" + strconv.Itoa(*calls)
		resp.Result = callResult{Content: []textContent{{Type: "text", Text: text}}}
	default:
		resp.Error = &rpcError{Code: -32601, Message: "method not found"}
	}
	return resp, true
}
