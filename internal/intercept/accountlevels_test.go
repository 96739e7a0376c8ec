package intercept

import (
	"context"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// barrierAllowances answers AllowanceTokens only once every one of want
// reads is under way at once, and fails a read whose context ends first:
// a store that answers slowly, read one account at a time, never
// answers.
type barrierAllowances struct {
	sharedAllowances
	want    int
	mu      sync.Mutex
	arrived int
	all     chan struct{}
}

func (b *barrierAllowances) AllowanceTokens(ctx context.Context, account string, a retry.Allowance, now time.Time) (float64, error) {
	b.mu.Lock()
	if b.arrived++; b.arrived == b.want {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return a.TokensAt(time.Time{}, now), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// TestAccountLevelsReadTogether: a scrape reads the shared allowances of
// all accounts at once. One at a time, a store that stopped answering
// would hold a scrape for allowanceTimeout per account, past a scraper's
// own timeout, and every series would be lost with it just when the
// store's errors are the ones to watch.
func TestAccountLevelsReadTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		accounts := map[string]policy.Account{}
		for _, name := range []string{"a", "b", "c"} {
			accounts[name] = policy.Account{Name: name, Rate: 1, Burst: 2}
		}
		shared := &barrierAllowances{want: len(accounts), all: make(chan struct{})}
		in := New(Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Accounts: accounts, Allowances: shared})
		levels := in.AccountLevels()
		if len(levels) != len(accounts) {
			t.Fatalf("levels %+v; want one per account", levels)
		}
		for _, l := range levels {
			if math.IsNaN(l.Tokens) || l.Tokens != 2 {
				t.Errorf("account %s: tokens %v; want 2, read with the others", l.Name, l.Tokens)
			}
		}
	})
}
