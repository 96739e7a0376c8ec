package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// names is a client hook that counts the commands sent by name.
type names struct{ c counter }

func (h *names) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *names) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.c.count(cmd.Name())
		return next(ctx, cmd)
	}
}

func (h *names) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.c.count(cmd.Name())
		}
		return next(ctx, cmds)
	}
}

func (h *names) sent(name string) int {
	n := 0
	for _, s := range h.c.seen(0) {
		if s == name {
			n++
		}
	}
	return n
}

// functionsClient returns a client of its own for the server at url,
// closed when t ends, and skips t if the server has no Redis Functions.
func functionsClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(opt)
	t.Cleanup(func() { raw.Close() })
	if err := raw.FunctionList(t.Context(), redis.FunctionListQuery{LibraryNamePattern: "none"}).Err(); err != nil {
		t.Skipf("the server has no Redis Functions: %v", err)
	}
	return raw
}

// TestFunctionsLoadedAgain: on a server with Redis Functions the scripts
// run as the functions of the store's library, which the store loads
// again when the server has lost it (FUNCTION FLUSH, a restart without
// persistence), without failing a call.
func TestFunctionsLoadedAgain(t *testing.T) {
	url := serverURL(t)
	raw := functionsClient(t, url)
	ctx := t.Context()
	s := open(t, url, newPrefix(t, url), nil)
	h := &names{}
	redisstore.Client(s).AddHook(h)
	if err := execute(ctx, s); err != nil {
		t.Fatal(err)
	}
	if n, e := h.sent("fcall"), h.sent("evalsha")+h.sent("eval"); n != 3 || e != 0 {
		t.Errorf("a new execution made %d FCALLs and %d EVAL(SHA)s; want 3 and none", n, e)
	}
	// Another build sharing the server keeps its own library; this one
	// is deleted, as FUNCTION FLUSH would.
	if err := raw.FunctionDelete(ctx, redisstore.Library()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := execute(ctx, s); err != nil {
		t.Fatalf("a new execution once the library was deleted: %v", err)
	}
	libs, err := raw.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisstore.Library()}).Result()
	if err != nil || len(libs) != 1 {
		t.Errorf("libraries named %s after a call: %v, %v; want the store's, loaded again", redisstore.Library(), libs, err)
	}
}

// dropAfterLoad is a client hook that deletes the store's library again
// as soon as the store has loaded it, as a FUNCTION FLUSH landing between
// the load and the call sent again would.
type dropAfterLoad struct{ raw *redis.Client }

func (h dropAfterLoad) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h dropAfterLoad) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); cmd.Name() == "function" && len(args) > 1 && args[1] == "load" {
			h.raw.FunctionDelete(ctx, redisstore.Library())
		}
		return err
	}
}

func (h dropAfterLoad) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSentAgainInFull: a call whose function the server had lost is sent
// again with its script in full, which cannot be lost in turn, not as a
// call of the library just loaded again, which can.
func TestSentAgainInFull(t *testing.T) {
	url := serverURL(t)
	raw := functionsClient(t, url)
	ctx := t.Context()
	s := open(t, url, newPrefix(t, url), nil)
	if err := execute(ctx, s); err != nil {
		t.Fatal(err)
	}
	redisstore.Client(s).AddHook(dropAfterLoad{raw})
	if err := raw.FunctionDelete(ctx, redisstore.Library()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := execute(ctx, s); err != nil {
		t.Fatalf("a new execution as the library came and went: %v", err)
	}
}

// TestSemanticsEval runs the scripts as a server without Redis Functions
// does.
func TestSemanticsEval(t *testing.T) {
	url := serverURL(t)
	recordtest.Run(t, func(t *testing.T, now func() time.Time) record.Store {
		return openWith(t, url, redisstore.Options{Now: now, Prefix: newPrefix(t, url), Eval: true})
	})
}

// TestPipeSendsAgainOnlyWhatDidNotRun: of a pipeline that failed part
// way, a script the server had forgotten and a command that ran, only the
// script is sent again. The library coming back or going in the middle
// of an attach pipeline had counted its attaches twice.
func TestPipeSendsAgainOnlyWhatDidNotRun(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	s := open(t, url, prefix, nil)
	ctx := t.Context()
	counter := prefix + "counter"
	forgotten := redis.NewScript("return 'sent in full' -- " + prefix) // a script no server has seen
	items := redisstore.Pipe(ctx, s, 2, func(p redis.Pipeliner, i int, full bool) {
		switch {
		case i == 0:
			p.Incr(ctx, counter)
		case full:
			forgotten.Eval(ctx, p, nil)
		default:
			forgotten.EvalSha(ctx, p, nil)
		}
	})
	if n, err := redisstore.Client(s).Get(ctx, counter).Int(); err != nil || n != 1 {
		t.Errorf("the command that ran ran %d times (%v); want once", n, err)
	}
	if len(items) != 2 || len(items[0]) != 1 || len(items[1]) != 1 {
		t.Fatalf("items %v; want one command each", items)
	}
	if v, err := items[0][0].(*redis.IntCmd).Result(); err != nil || v != 1 {
		t.Errorf("the first item's answer: %v, %v; want 1", v, err)
	}
	if v, err := items[1][0].(*redis.Cmd).Text(); err != nil || v != "sent in full" {
		t.Errorf("the forgotten script's answer: %q, %v; want it sent again in full", v, err)
	}
}
