package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/mcp-idempotent/mcp-idempotent/internal/demo"
	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/proxy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// demoScenes are the demo's scenarios, each told in a line or two.
var demoScenes = []struct {
	tell     string
	scenario demo.Scenario
	calls    int    // charge_card calls the client makes
	once     string // what the proxy made of them
}{
	{"A client calls charge_card ($50.00 to card 4242). The answer is lost on the way\nback, so the client times out and sends the same call again.",
		demo.LostAnswer, 2, "charged once; the retry got the stored answer"},
	{"An agent that lost track of its answers retries: five identical charge_card\ncalls, back to back.",
		demo.FiveRetries, 5, "charged once; the 4 retries got the stored answer"},
	{"A client that dispatches every call twice: two identical charge_card calls\n3 ms apart, under different request ids.",
		demo.DoubleDispatch, 2, "charged once; both calls got its answer"},
}

// runDemo plays each scenario without and with the proxy, and prints how
// often the card was charged each time.
func runDemo(ctx context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) > 0 {
		return usagef("demo takes no arguments")
	}
	for i, scene := range demoScenes {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintln(stdout, scene.tell)
		fmt.Fprintln(stdout)
		direct, err := demo.Run(ctx, nil, scene.scenario)
		if err != nil {
			return fmt.Errorf("demo without the proxy: %w", err)
		}
		proxied, err := demo.Run(ctx, demoProxy, scene.scenario)
		if err != nil {
			return fmt.Errorf("demo with the proxy: %w", err)
		}
		fmt.Fprintf(stdout, "  without mcp-idempotent   charge_card ran %s   %s\n", times(direct.Executions), verdict(direct, scene.once))
		fmt.Fprintf(stdout, "  with mcp-idempotent      charge_card ran %s   %s\n", times(proxied.Executions), verdict(proxied, scene.once))
		if proxied.Replayed > 0 {
			fmt.Fprintf(stdout, "%27s(answered from execution %s)\n", "", proxied.Execution)
		}
		if direct.Executions != scene.calls || proxied.Executions != 1 {
			return fmt.Errorf("the demo did not show what it should: %d executions without the proxy, %d with it", direct.Executions, proxied.Executions)
		}
	}
	return nil
}

// demoProxy runs the proxy between the demo's client and server.
func demoProxy(ctx context.Context, client, upstream demo.Conn) error {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	return proxy.New(client, upstream, proxy.Options{
		Interceptor: in, Actor: "demo", Scope: "session:demo", UpstreamID: "demo-bank",
	}).Run(ctx)
}

func times(n int) string {
	if n == 1 {
		return "1 time "
	}
	return fmt.Sprintf("%d times", n)
}

func verdict(r demo.Result, once string) string {
	if r.Executions > 1 {
		return fmt.Sprintf("the card was charged %d times", r.Executions)
	}
	return once
}
