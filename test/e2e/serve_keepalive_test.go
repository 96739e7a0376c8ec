package e2e

import "testing"

// TestServeKeepAliveTypeScript: the official TypeScript client reads a
// call's stream that carries keep-alive comments (serve --keep-alive 1s;
// the upstream holds the call until one has reached the client) and gets
// the call's answer, with no transport error: its SSE parser skips them.
func TestServeKeepAliveTypeScript(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--log-level", "debug", "--keep-alive", "1s"}, "-gate")
	_, stderr, wait := tsClient(t, ctx, "keepalive", s.url)
	if err := stderr.waitFor(ctx, "kept alive"); err != nil {
		t.Fatal(err)
	}
	gateOf(t, ctx, s)()
	out := wait()

	if len(out.TransportErrors) != 0 {
		t.Errorf("transport errors: %q", out.TransportErrors)
	}
	if out.KeepAlives == 0 {
		t.Errorf("no keep-alive reached the client")
	}
	if got, want := firstText(out.Result), "charged 100 to card 5555 (charge #1)"; got != want {
		t.Errorf("the call's text = %q, want %q", got, want)
	}
	if out.Charges != 1 {
		t.Errorf("charges = %d, want 1", out.Charges)
	}
}
