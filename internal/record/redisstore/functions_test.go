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

// TestFunctionsLoadedAgain: on a server with Redis Functions the scripts
// run as the functions of the store's library, which the store loads
// again when the server has lost it (FUNCTION FLUSH, a restart without
// persistence), without failing a call.
func TestFunctionsLoadedAgain(t *testing.T) {
	url := serverURL(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(opt)
	defer raw.Close()
	ctx := t.Context()
	if err := raw.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "none"}).Err(); err != nil {
		t.Skipf("the server has no Redis Functions: %v", err)
	}
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

// TestSemanticsEval runs the scripts as a server without Redis Functions
// does.
func TestSemanticsEval(t *testing.T) {
	url := serverURL(t)
	recordtest.Run(t, func(t *testing.T, now func() time.Time) record.Store {
		return openWith(t, url, redisstore.Options{Now: now, Prefix: newPrefix(t, url), Eval: true})
	})
}
