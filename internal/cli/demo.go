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

// runDemo plays the lost-answer scenario without and with the proxy, and
// prints how often the card was charged each time.
func runDemo(ctx context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) > 0 {
		return usagef("demo takes no arguments")
	}
	fmt.Fprintln(stdout, "A client calls charge_card ($50.00 to card 4242). The answer is lost on the way")
	fmt.Fprintln(stdout, "back, so the client times out and sends the same call again.")
	fmt.Fprintln(stdout)

	direct, err := demo.Run(ctx, nil)
	if err != nil {
		return fmt.Errorf("demo without the proxy: %w", err)
	}
	proxied, err := demo.Run(ctx, func(ctx context.Context, client, upstream demo.Conn) error {
		in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
		return proxy.New(client, upstream, proxy.Options{
			Interceptor: in, Actor: "demo", Scope: "session:demo", UpstreamID: "demo-bank",
		}).Run(ctx)
	})
	if err != nil {
		return fmt.Errorf("demo with the proxy: %w", err)
	}

	fmt.Fprintf(stdout, "  without mcp-idempotent   charge_card ran %s   %s\n", times(direct.Executions), verdict(direct))
	fmt.Fprintf(stdout, "  with mcp-idempotent      charge_card ran %s   %s\n", times(proxied.Executions), verdict(proxied))
	if proxied.Replayed {
		fmt.Fprintf(stdout, "%27s(the retry was answered from execution %s)\n", "", proxied.Execution)
	}
	if direct.Executions < 2 || proxied.Executions != 1 || !proxied.Replayed {
		return fmt.Errorf("the demo did not show what it should: %d executions without the proxy, %d with it", direct.Executions, proxied.Executions)
	}
	return nil
}

func times(n int) string {
	if n == 1 {
		return "1 time "
	}
	return fmt.Sprintf("%d times", n)
}

func verdict(r demo.Result) string {
	switch {
	case r.Executions > 1:
		return fmt.Sprintf("the card was charged %d times", r.Executions)
	case r.Replayed:
		return "charged once; the retry got the stored answer"
	default:
		return "charged once"
	}
}
