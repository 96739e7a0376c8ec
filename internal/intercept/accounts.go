package intercept

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// Allowances keep the accounts' allowances where every proxy process that
// shares them takes from one allowance per account: in a shared store.
//
// Both methods follow retry.Allowance's arithmetic (TakeAt, TokensAt),
// with the allowance a the caller passes and the time now it passes, never
// a clock of the store's, so that processes agree and tests need no
// sleep. An account never taken from has a full allowance.
type Allowances interface {
	// TakeAllowance takes room for one call from account's allowance at
	// now, if there is room; if there is none it takes nothing, and wait
	// is how long until there will be. It must be atomic across every
	// process sharing the store: of N takes at once from an account with
	// room for K < N, exactly K succeed. An error means nothing is known
	// to have been taken, and the caller must not send.
	TakeAllowance(ctx context.Context, account string, a retry.Allowance, now time.Time) (ok bool, wait time.Duration, err error)
	// AllowanceTokens returns the room left in account's allowance at
	// now, in calls, for metrics.
	AllowanceTokens(ctx context.Context, account string, a retry.Allowance, now time.Time) (float64, error)
}

// allowanceTimeout bounds one call to the shared Allowances, so that a
// store that stopped answering fails a call rather than holding it.
const allowanceTimeout = 5 * time.Second

// An account is one upstream account's limits: every send to a tool that
// names it, first attempt or retry, takes from its allowance; retries also
// need room in its retry budget; with a cap, a send needs a free slot.
//
// The allowance lives in the shared Allowances when the Interceptor has
// them, so that proxies sharing a store share it; the retry budget and
// the concurrency cap are always this process's own (see docs/policy.md,
// "Accounts and budgets").
type account struct {
	name      string
	allowance retry.Allowance
	shared    Allowances    // nil: bucket holds the allowance in process
	bucket    *retry.Bucket // nil when shared
	budget    *retry.RetryBudget
	slots     chan struct{} // one per call in flight; nil for no cap
}

func newAccounts(defs map[string]policy.Account, shared Allowances, now time.Time) map[string]*account {
	accounts := make(map[string]*account, len(defs))
	for name, d := range defs {
		a := &account{
			name:      name,
			allowance: retry.Allowance{Rate: d.Rate, Burst: d.Burst},
			shared:    shared,
			budget:    retry.NewRetryBudget(d.MaxTokens, d.TokenRatio),
		}
		if shared == nil {
			a.bucket = retry.NewBucket(a.allowance, now)
		}
		if d.MaxConcurrency > 0 {
			a.slots = make(chan struct{}, d.MaxConcurrency)
		}
		accounts[name] = a
	}
	return accounts
}

// take takes room for one call at now, from the shared allowance or the
// process's own.
func (a *account) take(ctx context.Context, now time.Time) (bool, time.Duration, error) {
	if a.shared == nil {
		ok, wait := a.bucket.Take(now)
		return ok, wait, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), allowanceTimeout)
	defer cancel()
	ok, wait, err := a.shared.TakeAllowance(ctx, a.name, a.allowance, now)
	if err != nil {
		return false, 0, fmt.Errorf("taking from the allowance of account %s: %w", a.name, err)
	}
	return ok, wait, nil
}

// tokens returns the room left in the allowance at now; NaN when the
// shared store cannot say.
func (a *account) tokens(now time.Time) float64 {
	if a.shared == nil {
		return a.bucket.Tokens(now)
	}
	ctx, cancel := context.WithTimeout(context.Background(), allowanceTimeout)
	defer cancel()
	t, err := a.shared.AllowanceTokens(ctx, a.name, a.allowance, now)
	if err != nil {
		return math.NaN()
	}
	return t
}

// accountOf returns the account a request's sends take from, or nil.
func (in *Interceptor) accountOf(req *Request) *account {
	if req.Policy.Retry == nil || req.Policy.Retry.Account == "" {
		return nil
	}
	return in.accounts[req.Policy.Retry.Account]
}

// A refusal says why admit did not send: the account had no room before
// the deadline (Wait is the wait that was needed), its concurrency cap
// stayed full until the deadline (Full), its shared allowance could not
// be reached (Err), in which case the proxy fails closed, or the wait was
// given up (Gone: the session ended, or the caller of a call no one else
// waits on left).
type refusal struct {
	Wait time.Duration
	Full bool
	Err  error
	Gone error
}

// message says what the refusal means, for the caller.
func (r refusal) message(account string) string {
	if r.Gone != nil {
		return fmt.Sprintf("%s while it waited for account %s", goneWords(r.Gone), account)
	}
	if r.Err != nil {
		return fmt.Sprintf("account %s's allowance could not be read, so the proxy fails closed: %v", account, r.Err)
	}
	if r.Full {
		return fmt.Sprintf("account %s had as many calls in flight as it allows until the call's deadline", account)
	}
	return fmt.Sprintf("account %s has no room for another call for %v, which would pass the call's deadline",
		account, r.Wait.Round(time.Millisecond))
}

// admit runs send once the account lets another call go: at once when it
// has room (and, with a cap, a free slot), else when there will be room,
// never blocking the caller's goroutine for longer than a store's answer
// takes. If the wait would reach deadline, or the shared allowance cannot
// be reached, refuse runs instead; and if, while it waits, ctx ends with
// an error that stop returns (see sessionEnded), refuse runs at once. A nil
// account admits at once. The slot taken is given back by release.
func (in *Interceptor) admit(ctx context.Context, a *account, deadline time.Time, stop func() error, send func(), refuse func(refusal)) {
	if a == nil {
		send()
		return
	}
	if err := stop(); err != nil {
		refuse(refusal{Gone: err}) // before taking room no one will use
		return
	}
	now := in.now()
	ok, wait, err := a.take(ctx, now)
	switch {
	case err != nil:
		refuse(refusal{Err: err})
		return
	case !ok:
		// As in retry.Backoff.Next, a wait that ends at the deadline
		// leaves the call no time, and is not begun either.
		if !deadline.IsZero() && !now.Add(wait).Before(deadline) {
			refuse(refusal{Wait: wait})
			return
		}
		in.wake(ctx, wait, stop, func() { in.admit(ctx, a, deadline, stop, send, refuse) },
			func(err error) { refuse(refusal{Gone: err}) })
		return
	}
	if a.slots == nil {
		send()
		return
	}
	select {
	case a.slots <- struct{}{}:
		send()
	default:
		// At the cap: wait for a slot on a goroutine of its own, up to
		// the deadline.
		go func() {
			var expired <-chan time.Time
			if !deadline.IsZero() {
				t := time.NewTimer(deadline.Sub(in.now()))
				defer t.Stop()
				expired = t.C
			}
			done := ctx.Done()
			for {
				select {
				case a.slots <- struct{}{}:
					send()
					return
				case <-expired:
					refuse(refusal{Full: true})
					return
				case <-done:
					if err := stop(); err != nil {
						refuse(refusal{Gone: err})
						return
					}
					done = nil // not a reason to give up: wait on
				}
			}
		}()
	}
}

// wake runs fire after d, on a goroutine of its own; or, if ctx ends
// first with an error that stop returns, gone with that error instead.
func (in *Interceptor) wake(ctx context.Context, d time.Duration, stop func() error, fire func(), gone func(error)) {
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		done := ctx.Done()
		for {
			select {
			case <-t.C:
				fire()
				return
			case <-done:
				if err := stop(); err != nil {
					gone(err)
					return
				}
				done = nil // not a reason to give up: wait on
			}
		}
	}()
}

// goneWords says why a wait was given up, from the error its context
// ended with.
func goneWords(err error) string {
	if errors.Is(err, ErrSessionEnded) {
		return "the session ended"
	}
	return "its caller left"
}

// sessionEnded returns ctx's error once it is ErrSessionEnded, else nil:
// what stops the waits of a recorded call. Its caller leaving does not,
// for the execution is the record's now (other callers may attach to it),
// but the end of the session does, since nothing will be sent after it.
func sessionEnded(ctx context.Context) func() error {
	return func() error {
		if err := ctx.Err(); errors.Is(err, ErrSessionEnded) {
			return err
		}
		return nil
	}
}

// release gives back the slot a send took.
func (a *account) release() {
	if a != nil && a.slots != nil {
		<-a.slots
	}
}

// An AccountLevel is where one account stands, for metrics.
type AccountLevel struct {
	Name string
	// Tokens is what is left of the allowance now: of the one shared
	// through the store when the Interceptor has Allowances (NaN when the
	// store cannot say), else of this process's own.
	Tokens float64
	// RetryBudget is the retry budget's level, always this process's own;
	// retries stop below half its maximum.
	RetryBudget float64
}

// AccountLevels returns every account's level. With shared Allowances it
// asks the store, one account at a time.
func (in *Interceptor) AccountLevels() []AccountLevel {
	now := in.now()
	levels := make([]AccountLevel, 0, len(in.accounts))
	for name, a := range in.accounts {
		levels = append(levels, AccountLevel{Name: name, Tokens: a.tokens(now), RetryBudget: a.budget.Level()})
	}
	return levels
}
