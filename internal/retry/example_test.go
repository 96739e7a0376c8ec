package retry_test

import (
	"fmt"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

func ExampleBackoff() {
	b := retry.Backoff{
		Base:        200 * time.Millisecond,
		Cap:         time.Second,
		MaxAttempts: 4,
		// Tests and examples fix the draw; leave Rand nil in production.
		Rand: func() float64 { return 0.5 },
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	deadline := now.Add(10 * time.Second)

	// The waits after each failed attempt, half of each ceiling here.
	for attempt := 0; ; attempt++ {
		wait, ok := b.Next(attempt, 0, now, deadline)
		if !ok {
			fmt.Printf("after attempt %d: give up\n", attempt)
			break
		}
		fmt.Printf("after attempt %d: wait %v\n", attempt, wait)
	}

	// An upstream's Retry-After is a floor on the wait...
	ra, _ := retry.ParseRetryAfter("3", now)
	wait, ok := b.Next(0, ra, now, deadline)
	fmt.Println(wait, ok)

	// ...and a wait past the caller's deadline fails now instead.
	ra, _ = retry.ParseRetryAfter("Thu, 01 Jan 2026 12:01:00 GMT", now)
	wait, ok = b.Next(0, ra, now, deadline)
	fmt.Println(wait, ok)

	// Output:
	// after attempt 0: wait 100ms
	// after attempt 1: wait 200ms
	// after attempt 2: wait 400ms
	// after attempt 3: give up
	// 3s true
	// 0s false
}

func ExampleBucket() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rate, _ := retry.ParseRate("10/s")
	b := retry.NewBucket(retry.Allowance{Rate: rate, Burst: 2}, now)

	for range 3 {
		ok, wait := b.Take(now)
		fmt.Println(ok, wait)
	}
	// A first attempt waits for room if its deadline allows, then takes.
	_, wait := b.Take(now)
	ok, _ := b.Take(now.Add(wait))
	fmt.Println(ok)

	// Output:
	// true 0s
	// true 0s
	// false 100ms
	// true
}

func ExampleRetryBudget() {
	budget := retry.NewRetryBudget(10, 0.1)
	for budget.AllowRetry() {
		budget.OnFailure() // an account in a storm: every retry fails
	}
	fmt.Printf("retries stop at level %.1f\n", budget.Level())
	for !budget.AllowRetry() {
		budget.OnSuccess()
	}
	fmt.Printf("and start again at level %.1f\n", budget.Level())

	// Output:
	// retries stop at level 5.0
	// and start again at level 5.1
}
