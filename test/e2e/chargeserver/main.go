// Command chargeserver is a test peer for the mcp-idempotent end-to-end tests:
// a stdio MCP server, built with the official go-sdk, whose charge_card tool
// has a side effect the tests can count.
//
// Tools:
//
//   - charge_card {card, amount, note?}: counts one charge, waits -delay, then
//     answers "charged AMOUNT to card CARD (charge #N)". Side-effecting, so the
//     proxy dedupes it. A call with a progress token is told of the charge
//     with a progress notification (1 of 2, "charged card CARD") just
//     before the answer.
//   - charges: the number of charges counted so far (read-only, so the proxy
//     passes it straight through; tests ask it for the count).
//   - charge_and_crash {card, amount}: counts one charge, then exits with
//     status 3 before answering: the side effect happened, the answer is lost.
//   - set_counter {value}: sets a value and returns it (idempotent).
//   - create_vm {name, region = "us-east-1"}: counts one VM and answers
//     "created vm NAME in REGION (vm #N)". Side-effecting. Its inputSchema is
//     written by hand so that region carries a JSON Schema default.
//   - echo_meta {tag}: answers with the params._meta it received, as JSON
//     text and as structured content {"meta": {...}, "n": N}. Side-effecting,
//     so the tests can see what the proxy forwards upstream.
//   - flaky_upload {tag}: answers an isError "429 Too Many Requests" result
//     to the first two attempts of each tag, then "uploaded TAG".
//     Side-effecting.
//   - calls: how many times create_vm, echo_meta, set_counter and
//     flaky_upload have run, as {"calls": {"create_vm": N, ...}} (read-only).
//
// With -ledger FILE, for tests that outlive one server process:
//
//   - pay {card, amount}: appends the execution id the proxy forwarded
//     (_meta "mcp-idempotent/execution-id") to FILE, then, the first time
//     only (FILE.crashed absent), creates FILE.crashed and exits with
//     status 3 before answering; later it answers "paid AMOUNT from card
//     CARD (payment #N)", N counting FILE's lines.
//   - payment_status {execution_id}: {"status": "done"} when FILE holds the
//     id, else {"status": "not_found"} (read-only).
//
// Other counts live in the process: one chargeserver per test.
//
// With -gate, charge_card, once it has counted the charge, logs "waiting
// for SIGUSR1" and answers only when the process gets a SIGUSR1, which
// releases every call waiting then (the kernel merges signals sent close
// together, so one signal per call would lose some): a test holds a call
// under way for as long as it needs, with no guess at a delay.
//
// With -http ADDR it serves Streamable HTTP instead of stdio; adding
// -stateless serves it in the go-sdk's stateless mode, the one that speaks
// protocol 2026-07-28 (SEP-2575: no sessions, every request on its own).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
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

// VMArgs are the arguments of create_vm.
type VMArgs struct {
	Name   string `json:"name"`
	Region string `json:"region"`
}

// vmInputSchema is create_vm's inputSchema: region has a default, which the
// proxy materialises before fingerprinting (and go-sdk before the handler
// runs).
var vmInputSchema = json.RawMessage(`{
	"type": "object",
	"properties": {
		"name": {"type": "string"},
		"region": {"type": "string", "default": "us-east-1"}
	},
	"required": ["name"]
}`)

// VM is the structured result of create_vm.
type VM struct {
	Name   string `json:"name"`
	Region string `json:"region"`
	N      int    `json:"n"` // the number of VMs created, this one included
}

// EchoArgs are the arguments of echo_meta.
type EchoArgs struct {
	Tag string `json:"tag"`
}

// Echo is the structured result of echo_meta.
type Echo struct {
	Meta map[string]any `json:"meta"`
	N    int            `json:"n"` // the number of echo_meta runs, this one included
	// Traceparent is the request's HTTP traceparent header, over HTTP.
	Traceparent string `json:"traceparent,omitempty"`
}

// Calls is the structured result of calls.
type Calls struct {
	Calls map[string]int `json:"calls"`
}

// ledger counts charges. It is the side effect the tests observe.
type ledger struct {
	mu      sync.Mutex // protects the fields below
	total   int
	perCard map[string]int
	counter int
	calls   map[string]int // runs of create_vm, echo_meta and set_counter
}

// called counts one run of tool and returns its new count.
func (l *ledger) called(tool string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[tool]++
	return l.calls[tool]
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
	ledgerFile := flag.String("ledger", "", "the file pay and payment_status keep their ledger in")
	httpAddr := flag.String("http", "", "serve Streamable HTTP on this address (printing the URL) instead of stdio")
	stateless := flag.Bool("stateless", false, "with -http, serve without sessions, which protocol 2026-07-28 needs")
	gated := flag.Bool("gate", false, "charge_card answers only after a SIGUSR1, which releases every call waiting")
	flag.Parse()
	log.SetPrefix("chargeserver: ")
	log.SetFlags(0)
	var g *gate
	if *gated {
		if gateSignal == nil {
			log.Fatal("-gate opens on SIGUSR1, which this system lacks")
		}
		g = newGate()
	}

	l := &ledger{perCard: map[string]int{}, calls: map[string]int{}}
	s := mcp.NewServer(&mcp.Implementation{Name: "chargeserver", Version: "0.1.0"}, nil)

	addChargeTools(s, l, g, *delay)
	addCountingTools(s, l)

	if *ledgerFile != "" {
		addLedgerTools(s, *ledgerFile)
	}

	if *httpAddr != "" {
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("http://%s/mcp\n", ln.Addr())
		handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
			&mcp.StreamableHTTPOptions{Stateless: *stateless})
		log.Fatal(http.Serve(ln, handler))
	}
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}

// addChargeTools adds the tools that charge a card, and the one that
// counts the charges.
func addChargeTools(s *mcp.Server, l *ledger, g *gate, delay time.Duration) {
	yes := true
	mcp.AddTool(s, &mcp.Tool{
		Name:        "charge_card",
		Description: "Charge a card. Not idempotent: every execution is a new charge.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: false},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ChargeArgs) (*mcp.CallToolResult, Charge, error) {
		n := l.charge(in.Card)
		log.Printf("charge_card card=%s amount=%v n=%d", in.Card, in.Amount, n)

		// The charge has happened; only the answer is slow. The wait ignores
		// ctx on purpose: a payment that left cannot be called back, and a
		// cancelled caller must not undo the count.
		time.Sleep(delay)
		if g != nil {
			open := g.wait()
			log.Printf("charge_card card=%s n=%d: waiting for SIGUSR1", in.Card, n)
			<-open
		}
		if ctx.Err() != nil {
			log.Printf("charge_card card=%s n=%d: the client cancelled the request; answering anyway", in.Card, n)
		}
		if token := req.Params.GetProgressToken(); token != nil {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: 1, Total: 2, Message: "charged card " + in.Card,
			})
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
}

// addCountingTools adds the tools whose every execution is counted, and
// the one that reports the counts.
func addCountingTools(s *mcp.Server, l *ledger) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "set_counter",
		Description: "Set the counter to value.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in CounterArgs) (*mcp.CallToolResult, Counter, error) {
		l.mu.Lock()
		l.counter = in.Value
		l.calls["set_counter"]++
		l.mu.Unlock()
		return &mcp.CallToolResult{
			Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(in.Value)}},
		}, Counter{Value: in.Value}, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "create_vm",
		Description: "Create a virtual machine. Every execution creates one.",
		InputSchema: vmInputSchema,
	}, func(_ context.Context, _ *mcp.CallToolRequest, in VMArgs) (*mcp.CallToolResult, VM, error) {
		n := l.called("create_vm")
		log.Printf("create_vm name=%s region=%s n=%d", in.Name, in.Region, n)
		return &mcp.CallToolResult{
			Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("created vm %s in %s (vm #%d)", in.Name, in.Region, n)}},
		}, VM{Name: in.Name, Region: in.Region, N: n}, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "echo_meta",
		Description: "Answer with the _meta of the request. Counted as a side effect.",
	}, func(_ context.Context, req *mcp.CallToolRequest, in EchoArgs) (*mcp.CallToolResult, Echo, error) {
		n := l.called("echo_meta")
		meta := map[string]any{}
		for k, v := range req.Params.Meta {
			meta[k] = v
		}
		b, err := json.Marshal(meta)
		if err != nil {
			return nil, Echo{}, err
		}
		log.Printf("echo_meta tag=%s n=%d meta=%s", in.Tag, n, b)
		echo := Echo{Meta: meta, N: n}
		if req.Extra != nil && req.Extra.Header != nil {
			echo.Traceparent = req.Extra.Header.Get("traceparent")
		}
		return &mcp.CallToolResult{
			Content: []mcp.Content{&mcp.TextContent{Text: string(b)}},
		}, echo, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "calls",
		Description: "How many times create_vm, echo_meta and set_counter have run.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, Calls, error) {
		l.mu.Lock()
		counts := make(map[string]int, len(l.calls))
		for k, v := range l.calls {
			counts[k] = v
		}
		l.mu.Unlock()
		b, _ := json.Marshal(counts)
		return &mcp.CallToolResult{
			Content: []mcp.Content{&mcp.TextContent{Text: string(b)}},
		}, Calls{Calls: counts}, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "flaky_upload",
		Description: "Upload; the vendor answers 429 to the first two attempts of each name.",
	}, func(_ context.Context, _ *mcp.CallToolRequest, in EchoArgs) (*mcp.CallToolResult, struct{}, error) {
		n := l.called("flaky_upload")
		l.mu.Lock()
		l.calls["flaky_upload:"+in.Tag]++
		tries := l.calls["flaky_upload:"+in.Tag]
		l.mu.Unlock()
		log.Printf("flaky_upload tag=%s try=%d n=%d", in.Tag, tries, n)
		if tries <= 2 {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "429 Too Many Requests: rate limited"}}}, struct{}{}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "uploaded " + in.Tag}}}, struct{}{}, nil
	})
}

// A gate holds calls until the next SIGUSR1.
type gate struct {
	mu   sync.Mutex    // protects open
	open chan struct{} // closed by the next SIGUSR1
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, gateSignal)
	go func() {
		for range sig {
			g.mu.Lock()
			close(g.open)
			g.open = make(chan struct{})
			g.mu.Unlock()
		}
	}()
	return g
}

// wait returns a channel the next SIGUSR1 closes.
func (g *gate) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// PayArgs are the arguments of pay.
type PayArgs struct {
	Card   string  `json:"card"`
	Amount float64 `json:"amount"`
}

// StatusArgs are the arguments of payment_status.
type StatusArgs struct {
	ExecutionID string `json:"execution_id"`
}

// Status is the structured result of payment_status.
type Status struct {
	Status string `json:"status"`
}

// addLedgerTools adds pay and payment_status, which keep their ledger in a
// file so that it outlives the process.
func addLedgerTools(s *mcp.Server, file string) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "pay",
		Description: "Pay from a card; the first payment crashes the server after it is recorded.",
	}, func(_ context.Context, req *mcp.CallToolRequest, in PayArgs) (*mcp.CallToolResult, struct{}, error) {
		id, _ := req.Params.Meta["mcp-idempotent/execution-id"].(string)
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, struct{}{}, err
		}
		fmt.Fprintln(f, id)
		f.Close()
		if _, err := os.Stat(file + ".crashed"); os.IsNotExist(err) {
			os.WriteFile(file+".crashed", nil, 0o644)
			log.Printf("pay card=%s execution=%s: recorded; exiting with status 3", in.Card, id)
			os.Exit(3)
		}
		n := len(ledgerLines(file))
		log.Printf("pay card=%s execution=%s n=%d", in.Card, id, n)
		text := fmt.Sprintf("paid %s from card %s (payment #%d)", strconv.FormatFloat(in.Amount, 'f', -1, 64), in.Card, n)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, struct{}{}, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "payment_status",
		Description: "Whether the payment of an execution was made.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in StatusArgs) (*mcp.CallToolResult, Status, error) {
		st := Status{Status: "not_found"}
		for _, line := range ledgerLines(file) {
			if line == in.ExecutionID {
				st.Status = "done"
			}
		}
		log.Printf("payment_status execution=%s: %s", in.ExecutionID, st.Status)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: st.Status}}}, st, nil
	})
}

func ledgerLines(file string) []string {
	b, _ := os.ReadFile(file)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
