package intercept

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDetached checks that a Request's context without its caller's
// cancellation (bg) is what context.WithoutCancel makes of the caller's,
// for each thing the context package or a store may ask of it.
func TestDetached(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancelCause(context.WithValue(t.Context(), key{}, "v"))
	parent, stop := context.WithTimeout(parent, time.Hour)
	defer stop()
	req := &Request{caller: detached{parent}}
	child, cancelChild := context.WithCancel(req.bg())
	defer cancelChild()
	cancel(errors.New("the caller left"))
	for name, ctx := range map[string]context.Context{"bg": req.bg(), "WithoutCancel": context.WithoutCancel(parent)} {
		if _, ok := ctx.Deadline(); ok || ctx.Done() != nil || ctx.Err() != nil {
			t.Errorf("%s after the caller's end: a deadline %v, Done %v, Err %v; want none", name, ok, ctx.Done(), ctx.Err())
		}
		if v := ctx.Value(key{}); v != "v" {
			t.Errorf("%s: Value = %v; want the caller's", name, v)
		}
		if err := context.Cause(ctx); err != nil {
			t.Errorf("%s: Cause = %v; want nil", name, err)
		}
	}
	if child.Err() != nil || context.Cause(child) != nil {
		t.Errorf("a context made from bg ended with the caller's: Err %v, Cause %v", child.Err(), context.Cause(child))
	}
	cancelChild()
	if !errors.Is(context.Cause(child), context.Canceled) {
		t.Errorf("a context made from bg, cancelled: Cause = %v; want its own Canceled", context.Cause(child))
	}
}

// endsByItself is a context that has ended on its own, without the
// context package's cancellation.
type endsByItself struct{ context.Context }

var errOwnEnd = errors.New("its own end")

func (endsByItself) Err() error { return errOwnEnd }

// TestDetachedHidesCause checks that a context made on top of bg that
// ends by itself has its own cause, as on context.WithoutCancel's, and not
// the caller's.
func TestDetachedHidesCause(t *testing.T) {
	parent, cancel := context.WithCancelCause(t.Context())
	req := &Request{caller: detached{parent}}
	cancel(errors.New("the caller left"))
	for name, ctx := range map[string]context.Context{"bg": req.bg(), "WithoutCancel": context.WithoutCancel(parent)} {
		if err := context.Cause(endsByItself{ctx}); err != errOwnEnd {
			t.Errorf("on %s: Cause = %v; want %v", name, err, errOwnEnd)
		}
	}
	if cancelKey == nil {
		t.Error("context.Cause asked an ended context for no key")
	}
}
