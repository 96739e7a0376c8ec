// Command ledgerserver is the upstream of the torture tests: a stdio MCP
// server, built with the official go-sdk, whose side effect is a line
// appended to a file, so that it can be counted after the processes that
// made it are gone.
//
// Tools:
//
//   - pay {intent, hold_ms?}: appends "INTENT EXECUTION PID" to -ledger
//     (EXECUTION is the id the proxy forwarded in _meta, PID this
//     process's), logs "pay intent=INTENT: recorded", waits hold_ms, then
//     answers "paid INTENT (pid PID)". Side-effecting: the proxy dedupes it.
//   - pay_and_exit {intent}: appends the same line, logs it, then exits
//     with status 3 before answering: the side effect happened, the answer
//     is lost.
//   - balance: the number of lines in the ledger (read-only, so the proxy
//     passes it through).
//
// Every line is one write to a file opened with O_APPEND, so that several
// servers may share one ledger.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// PayArgs are the arguments of pay and pay_and_exit.
type PayArgs struct {
	Intent string `json:"intent"`
	HoldMS int    `json:"hold_ms,omitempty"`
}

// Balance is the structured result of balance.
type Balance struct {
	Lines int `json:"lines"`
}

func main() {
	ledger := ""
	if len(os.Args) == 3 && os.Args[1] == "-ledger" {
		ledger = os.Args[2]
	} else {
		log.Fatal("usage: ledgerserver -ledger FILE")
	}
	log.SetPrefix("ledgerserver: ")
	log.SetFlags(0)

	record := func(req *mcp.CallToolRequest, in PayArgs) error {
		id, _ := req.Params.Meta["mcp-idempotent/execution-id"].(string)
		f, err := os.OpenFile(ledger, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = fmt.Fprintf(f, "%s %s %d\n", in.Intent, id, os.Getpid())
		return err
	}

	s := mcp.NewServer(&mcp.Implementation{Name: "ledgerserver", Version: "0.1.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "pay",
		Description: "Pay once per execution; every execution is a ledger line.",
	}, func(_ context.Context, req *mcp.CallToolRequest, in PayArgs) (*mcp.CallToolResult, struct{}, error) {
		if err := record(req, in); err != nil {
			return nil, struct{}{}, err
		}
		log.Printf("pay intent=%s: recorded", in.Intent)
		// The payment has happened; only the answer waits. The wait
		// ignores the context: a payment that left cannot be called back.
		time.Sleep(time.Duration(in.HoldMS) * time.Millisecond)
		text := fmt.Sprintf("paid %s (pid %d)", in.Intent, os.Getpid())
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, struct{}{}, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "pay_and_exit",
		Description: "Pay, then exit before answering.",
	}, func(_ context.Context, req *mcp.CallToolRequest, in PayArgs) (*mcp.CallToolResult, struct{}, error) {
		if err := record(req, in); err != nil {
			return nil, struct{}{}, err
		}
		log.Printf("pay_and_exit intent=%s: recorded; exiting with status 3", in.Intent)
		os.Exit(3)
		return nil, struct{}{}, nil // not reached
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "balance",
		Description: "The number of ledger lines.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, Balance, error) {
		b, _ := os.ReadFile(ledger)
		n := strings.Count(string(b), "\n")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(n)}}}, Balance{Lines: n}, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
