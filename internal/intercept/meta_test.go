package intercept

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// TestAppendTime checks appendTime against time.AppendFormat and
// json.Marshal, which it writes by hand, across years, zones (offsets
// with seconds, west and east, the local one) and fractions.
func TestAppendTime(t *testing.T) {
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("w", -(3*3600 + 30*60 + 7)),
		time.FixedZone("e", 14*3600), time.FixedZone("far", 30*3600), time.FixedZone("s", 59)}
	times := []time.Time{{}, time.Unix(0, 0), time.Unix(minTime, 0), time.Unix(minTime-1, 999),
		time.Unix(maxTime, 1), time.Unix(maxTime+1, 0), time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2000, 2, 29, 23, 59, 59, 100, time.UTC), time.Date(2100, 3, 1, 0, 0, 0, 120000000, time.UTC),
		time.Now()}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		times = append(times, time.Unix(rng.Int64N(2*maxTime)-maxTime, rng.Int64N(1e9)))
		times = append(times, time.Unix(rng.Int64N(4e9), rng.Int64N(1000)*1e6))
	}
	for _, at := range times {
		for _, z := range zones {
			at := at.In(z)
			want := string(appendTimeSlowly(nil, at))
			if got := string(appendTime(nil, at)); got != want {
				t.Fatalf("appendTime(%v) = %s; want %s", at, got, want)
			}
			if want == "null" {
				continue
			}
			if j, err := json.Marshal(at); err == nil && string(j) != want {
				t.Fatalf("appendTime(%v) = %s; json.Marshal writes %s", at, want, j)
			}
		}
	}
}

// copying is a CopyingReplier that keeps a copy of each answer, as a
// transport writing it into a frame of its own does.
type copying struct{ got []Answer }

func (c *copying) CopiesAnswer() bool { return true }
func (c *copying) Reply(a Answer) error {
	c.got = append(c.got, Answer{Result: bytes.Clone(a.Result), Error: bytes.Clone(a.Error)})
	return nil
}

// TestReplayIntoReusedBuffer checks that replays built in the buffer a
// CopyingReplier lets the interceptor use again each carry their own
// count of callers, and leave the stored result as it was.
func TestReplayIntoReusedBuffer(t *testing.T) {
	h := newHarness(charged)
	view(t, h.call(t.Context(), t, chargeCall).only(t))
	for i := range 3 {
		req, _ := h.request(t, chargeCall)
		c := &copying{}
		req.Reply = c
		h.in.Handle(t.Context(), req)
		if len(c.got) != 1 {
			t.Fatalf("replay %d: %d answers; want 1", i+1, len(c.got))
		}
		v := view(t, c.got[0])
		if !v.Meta.Replayed || v.Meta.Execution.Attached != i+1 {
			t.Fatalf("replay %d: %s; want it marked replayed, with %d attached", i+1, c.got[0].Result, i+1)
		}
	}
	for _, r := range h.store.Records() {
		if bytes.Contains(r.Result, []byte("_meta")) {
			t.Fatalf("the stored result was written into: %s", r.Result)
		}
	}
}

// TestReplayMarkedInEveryMeta: an upstream's result giving _meta twice,
// or in another case, cannot make a replay read as fresh, nor name
// another execution, to a client that decodes it with Go's
// encoding/json, which merges every member named _meta in any case, in
// order.
func TestReplayMarkedInEveryMeta(t *testing.T) {
	const forged = `"_meta":{},"_META":{"mcp-idempotent/replayed":false,"mcp-idempotent/execution":{"id":"exe_forged"}}`
	h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"content":[{"type":"text","text":"ok"}],` + forged + `}`), nil
	})
	h.call(t.Context(), t, chargeCall).only(t)
	v := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if id := h.onlyRecord(t).ID; !v.Meta.Replayed || v.Meta.Execution.ID != id {
		t.Fatalf("the replay reads as replayed %v, execution %q; want true, %s", v.Meta.Replayed, v.Meta.Execution.ID, id)
	}
}
