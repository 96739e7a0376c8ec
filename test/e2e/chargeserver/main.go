// Command chargeserver is a test peer for the mcp-idempotent end-to-end tests:
// a stdio MCP server, built with the official go-sdk, whose charge_card tool
// has a side effect the tests can count.
//
// Tools:
//
//   - charge_card {card, amount, note?}: counts one charge, waits -delay, then
//     answers "charged AMOUNT to card CARD (charge #N)". Side-effecting, so the
//     proxy dedupes it.
//   - charges: the number of charges counted so far (read-only, so the proxy
//     passes it straight through; tests ask it for the count).
//   - charge_and_crash {card, amount}: counts one charge, then exits with
//     status 3 before answering: the side effect happened, the answer is lost.
//   - set_counter {value}: sets a value and returns it (idempotent).
//
// Counts live in the process: one chargeserver per test.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ChargeArgs are the arguments of charge_card and charge_and_crash.
type ChargeArgs struct {
	Card   string  `json:"card"`
	Amount float64 `json:"amount"`
	Note   string  `json:"note,omitempty"`
}

// Charge is the structured result of charge_card.
type Charge struct {
	ChargeID string `json:"charge_id"`
	N        int    `json:"n"` // the card's charge count, this one included
}

// Count is the structured result of charges.
type Count struct {
	Total int `json:"total"`
}

// CounterArgs are the arguments of set_counter.
type CounterArgs struct {
	Value int `json:"value"`
}

// Counter is the structured result of set_counter.
type Counter struct {
	Value int `json:"value"`
}

// ledger counts charges. It is the side effect the tests observe.
type ledger struct {
	mu      sync.Mutex // protects the fields below
	total   int
	perCard map[string]int
	counter int
}

// charge counts one charge to card and returns that card's new count.
func (l *ledger) charge(card string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	l.perCard[card]++
	return l.perCard[card]
}

func (l *ledger) totalCharges() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

func main() {
	delay := flag.Duration("delay", 0, "how long charge_card waits after charging and before answering")
	flag.Parse()
	log.SetPrefix("chargeserver: ")
	log.SetFlags(0)

	l := &ledger{perCard: map[string]int{}}
	s := mcp.NewServer(&mcp.Implementation{Name: "chargeserver", Version: "0.1.0"}, nil)

	yes := true
	mcp.AddTool(s, &mcp.Tool{
		Name:        "charge_card",
		Description: "Charge a card. Not idempotent: every execution is a new charge.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: false},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in ChargeArgs) (*mcp.CallToolResult, Charge, error) {
		n := l.charge(in.Card)
		log.Printf("charge_card card=%s amount=%v n=%d", in.Card, in.Amount, n)
		// The charge has happened; only the answer is slow. The wait ignores
		// ctx on purpose: a payment that left cannot be called back, and a
		// cancelled caller must not undo the count.
		time.Sleep(*delay)
		if ctx.Err() != nil {
			log.Printf("charge_card card=%s n=%d: the client cancelled the request; answering anyway", in.Card, n)
		}
		// Tests wait for this line to know the answer has left.
		log.Printf("charge_card card=%s n=%d: answered", in.Card, n)
		out := Charge{ChargeID: fmt.Sprintf("ch_%s_%d", in.Card, n), N: n}
		text := fmt.Sprintf("charged %s to card %s (charge #%d)",
			strconv.FormatFloat(in.Amount, 'f', -1, 64), in.Card, n)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "charges",
		Description: "The number of charges made so far.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, Count, error) {
		total := l.totalCharges()
		return &mcp.CallToolResult{
			Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(total)}},
		}, Count{Total: total}, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "charge_and_crash",
		Description: "Charge a card, then crash before answering.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in ChargeArgs) (*mcp.CallToolResult, Charge, error) {
		n := l.charge(in.Card)
		log.Printf("charge_and_crash card=%s amount=%v n=%d: exiting with status 3", in.Card, in.Amount, n)
		os.Exit(3)
		return nil, Charge{}, nil // not reached
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "set_counter",
		Description: "Set the counter to value.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in CounterArgs) (*mcp.CallToolResult, Counter, error) {
		l.mu.Lock()
		l.counter = in.Value
		l.mu.Unlock()
		return &mcp.CallToolResult{
			Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(in.Value)}},
		}, Counter{Value: in.Value}, nil
	})

	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
