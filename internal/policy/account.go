package policy

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// Bounds and defaults of an account.
const (
	maxAccountCount   = 1_000_000 // for burst and max_concurrency
	maxBudgetNumber   = 1000      // for retry_budget's numbers
	defaultBurst      = 1
	defaultMaxTokens  = 10
	defaultTokenRatio = 0.1
	// maxRefill bounds how long an empty burst takes to fill again. The
	// stores keep when an allowance is next full in unix nanoseconds,
	// which end in 2262: a longer refill would pass it.
	maxRefill = 100 * 365 * 24 * time.Hour
)

// The keys of an account and of its retry budget, in the order errors
// list them.
var (
	accountKeys = []string{"rate", "burst", "max_concurrency", "retry_budget"}
	budgetKeys  = []string{"max_tokens", "token_ratio"}
)

// An accountSpec is one entry of accounts as written.
type accountSpec struct {
	block
	name           string
	key            *yaml.Node // its name, where an error about the whole goes
	rate           val[float64]
	burst          val[int]
	maxConcurrency val[int]
	maxTokens      val[float64]
	tokenRatio     val[float64]
}

func (d *decoder) accounts(n *yaml.Node) []*accountSpec {
	fields, ok := d.mapping(n, "accounts", "a mapping of account names to allowances")
	if !ok {
		return nil
	}
	accounts := make([]*accountSpec, 0, len(fields))
	for _, kv := range fields {
		a := &accountSpec{name: kv.key.Value, key: kv.key}
		if a.name == "" {
			// A retry rule could not name it: account: "" is no account.
			d.errorf(kv.key, "accounts", "an account needs a name, which a retry rule's account names")
			continue
		}
		read := map[string]func(v *yaml.Node, field string){
			"rate":            into(d, &a.rate, parseRate),
			"burst":           into(d, &a.burst, parseCount(1)),
			"max_concurrency": into(d, &a.maxConcurrency, parseCount(0)), // 0: no cap
			"retry_budget":    func(v *yaml.Node, f string) { d.retryBudget(v, f, a) },
		}
		a.block = d.fields(kv.val, "accounts."+fieldName(a.name), "a mapping with rate, burst, max_concurrency and retry_budget", keysOf(accountKeys, read))
		accounts = append(accounts, a)
	}
	return accounts
}

// parseRate reads a rate in calls per second from its spelling per
// unit, such as 500/h.
func parseRate(n *yaml.Node) (float64, string) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return 0, fmt.Sprintf("want a rate such as 500/h, 10/s, 3/m or 1000/d, not %s", describe(n))
	}
	r, err := retry.ParseRate(n.Value)
	if err != nil {
		return 0, fmt.Sprintf("%q is not a rate such as 500/h, 10/s, 3/m or 1000/d (%v)", n.Value, err)
	}
	return r, ""
}

// parseCount reads a whole number from lo to maxAccountCount.
func parseCount(lo int) parse[int] {
	return func(n *yaml.Node) (int, string) {
		if c, ok := wholeNumber(n, lo, maxAccountCount); ok {
			return c, ""
		}
		return 0, fmt.Sprintf("%s: want a whole number from %d to %d", quoted(n), lo, maxAccountCount)
	}
}

// retryBudget reads an account's retry_budget, whose values are numbers.
func (d *decoder) retryBudget(n *yaml.Node, field string, a *accountSpec) {
	fields, ok := d.mapping(n, field, "a mapping with max_tokens and token_ratio")
	if !ok {
		return
	}
	for _, kv := range fields {
		var dst *val[float64]
		switch kv.key.Value {
		case "max_tokens":
			dst = &a.maxTokens
		case "token_ratio":
			dst = &a.tokenRatio
		default:
			// Said before what its value is: "want a number" would
			// not tell a misspelt key.
			d.unknownKey(kv.key, field, budgetKeys)
			continue
		}
		v := resolve(kv.val)
		if !d.readText(v.Value, v) {
			continue
		}
		x, err := strconv.ParseFloat(v.Value, 64)
		if v.Kind != yaml.ScalarNode || err != nil || !(x > 0) || x > maxBudgetNumber {
			d.errorf(v, field+"."+kv.key.Value, "%s: want a number more than 0 and at most %d", quoted(v), maxBudgetNumber)
			continue
		}
		*dst = good(d.place(v), x)
	}
}

// accounts validates the accounts, and returns them by name.
func (v *validator) accounts(specs []*accountSpec) map[string]Account {
	accounts := make(map[string]Account, len(specs))
	for _, s := range specs {
		if !s.read {
			continue
		}
		if s.rate.at == nil {
			v.errorf(place{at: s.key, step: s.step}, s.field, "an account needs a rate, such as rate: 500/h")
			continue
		}
		if !s.rate.ok || s.burst.bad() {
			continue // said where it is written
		}
		burst := s.burst.or(defaultBurst)
		if refill := float64(burst) / s.rate.v; refill > maxRefill.Seconds() {
			at, field := s.rate.place, s.field+".rate"
			if s.burst.at != nil {
				at, field = s.burst.place, s.field+".burst"
			}
			// Rounded down, with "over": rounded, a refill just past the
			// limit would read as the limit itself.
			years, over := refill/(365*24*3600), "over "
			if years == math.Floor(years) {
				over = ""
			}
			v.errorf(at, field, "a burst of %d at %s takes %s%.0f years to fill again; at most %.0f (a smaller burst, or a higher rate)",
				burst, s.rate.at.Value, over, math.Floor(years), maxRefill.Hours()/(365*24))
			continue
		}
		accounts[s.name] = Account{
			Name:           s.name,
			Rate:           s.rate.v,
			Burst:          burst,
			MaxConcurrency: s.maxConcurrency.v,
			MaxTokens:      s.maxTokens.or(defaultMaxTokens),
			TokenRatio:     s.tokenRatio.or(defaultTokenRatio),
		}
	}
	return accounts
}
