package intercept

import (
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// An account is the shared allowance of one upstream account in this
// process: every send to a tool that names it, first attempt or retry,
// takes a token; retries also need room in its retry budget.
type account struct {
	name   string
	bucket *retry.Bucket
	budget *retry.RetryBudget
	slots  chan struct{} // one per call in flight; nil for no cap
}

func newAccounts(defs map[string]policy.Account, now time.Time) map[string]*account {
	accounts := make(map[string]*account, len(defs))
	for name, d := range defs {
		a := &account{
			name:   name,
			bucket: retry.NewBucket(retry.Allowance{Rate: d.Rate, Burst: d.Burst}, now),
			budget: retry.NewRetryBudget(d.MaxTokens, d.TokenRatio),
		}
		if d.MaxConcurrency > 0 {
			a.slots = make(chan struct{}, d.MaxConcurrency)
		}
		accounts[name] = a
	}
	return accounts
}

// accountOf returns the account a request's sends take from, or nil.
func (in *Interceptor) accountOf(req *Request) *account {
	if req.Policy.Retry == nil || req.Policy.Retry.Account == "" {
		return nil
	}
	return in.accounts[req.Policy.Retry.Account]
}

// admit runs send once the account lets another call go: at once when it
// has a token (and, with a cap, a free slot), else on a timer when one
// will be there, never blocking the caller's goroutine. If the wait would
// pass deadline, refuse runs instead, with the wait that was needed. A nil
// account admits at once. The slot taken is given back by release.
func (in *Interceptor) admit(a *account, deadline time.Time, send func(), refuse func(wait time.Duration)) {
	if a == nil {
		send()
		return
	}
	now := in.now()
	ok, wait := a.bucket.Take(now)
	if !ok {
		if !deadline.IsZero() && now.Add(wait).After(deadline) {
			refuse(wait)
			return
		}
		time.AfterFunc(wait, func() { in.admit(a, deadline, send, refuse) })
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
		// At the cap: wait for a slot on a goroutine of its own.
		go func() {
			a.slots <- struct{}{}
			send()
		}()
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
	// Tokens is what is left of the allowance now.
	Tokens float64
	// RetryBudget is the retry budget's level; retries stop below half
	// its maximum.
	RetryBudget float64
}

// AccountLevels returns every account's level.
func (in *Interceptor) AccountLevels() []AccountLevel {
	now := in.now()
	levels := make([]AccountLevel, 0, len(in.accounts))
	for name, a := range in.accounts {
		levels = append(levels, AccountLevel{Name: name, Tokens: a.bucket.Tokens(now), RetryBudget: a.budget.Level()})
	}
	return levels
}
