package intercept

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
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

// A refusal says why an execution's account did not let it send: the
// account had no room before the deadline (Wait is the wait that was
// needed), its concurrency cap stayed full until the deadline (Full), its
// shared allowance could not be reached (Err), in which case the proxy
// fails closed, or the wait was given up (Gone: the session ended, or the
// caller of a call no one else waits on left).
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

// goneWords says why a wait was given up, from the error its context
// ended with.
func goneWords(err error) string {
	if errors.Is(err, ErrSessionEnded) {
		return "the session ended"
	}
	return "its caller left"
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
// asks the store for every account at once: a scrape then waits for the
// slowest read, not their sum, which from a store that stopped answering
// is allowanceTimeout per account, past a scraper's own timeout.
func (in *Interceptor) AccountLevels() []AccountLevel {
	now := in.now()
	levels := make([]AccountLevel, 0, len(in.accounts))
	for name, a := range in.accounts {
		levels = append(levels, AccountLevel{Name: name, RetryBudget: a.budget.Level()})
	}
	var wg sync.WaitGroup
	for i := range levels {
		l := &levels[i]
		a := in.accounts[l.Name]
		if a.shared == nil {
			l.Tokens = a.tokens(now)
			continue
		}
		wg.Go(func() { l.Tokens = a.tokens(now) })
	}
	wg.Wait()
	return levels
}
