package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// BenchmarkLayout asks how fast another layout of a record could make new
// executions at 32 in flight, on this server and with this client. Each
// execution's three steps (reserved and dispatched, completed, delivered)
// go as the store sends them: through a batch queue (64 a pipeline, two
// pipelines at once), from 32 goroutines a processor. Each step is the
// least that layout needs:
//
//   - floor: the commands of today's scripts, bare (BenchmarkFloor's, in
//     flight as the store is);
//   - hash: the record a hash at one key, each step one script of two to
//     four commands (the reservation writes a TTL and an index, the
//     outcome publishes);
//   - string: the record one string, claimed with SET NX GET, then each
//     step one script of a GET and a SET;
//   - bare: one SET a step (NX with GET, then XX), no check at all: no
//     layout that keeps its checks in the server beats it;
//   - full-holder: the record one string at its holder key, as
//     layoutrec_test.go describes, each step one function (FCALL) that
//     does all a store must. The reservation claims the holder key with
//     SET NX GET, so reading any holder (and settling an orphan, or
//     replacing or matching it, in the script), then claims the index
//     with SET NX (an id already used is refused), each with the TTL of
//     a record in flight. Each update reads the record's header
//     (GETRANGE), checks the transition, From, the owner and attempts
//     fenced to and the version on it, writes the header (SETRANGE) and
//     appends its chunks (APPEND), and publishes a settle; the keys keep
//     the TTL the reservation gave them unless a settle needs a longer
//     one. Completed is fenced to its owner, delivered applies from
//     completed only, as the proxy sends them. The client encodes what
//     it adds and reads each reply;
//   - full-string: the same, the record at a key of its own and the
//     holder key holding its id, as today (one SET more);
//   - full-holder-batched: full-holder, but the steps of each batch the
//     queue hands a sender go in one call of a function that loops over
//     them, each record's keys in KEYS and its arguments in ARGV, and
//     answers each its reply, so the cost of a call is paid once a
//     batch, not once a step. Its keys are of many slots: it cannot
//     run on Redis Cluster;
//   - full-holder-batched-delivered: the same for delivered only, which
//     is off a call's latency path; the other two steps a call each.
//
// One client is subscribed to the channels the steps publish on, as
// every Store is. Its ns/op, beside BenchmarkReserveComplete/
// parallel32's, bounds what a new layout could gain (docs/benchmarks.md).
func BenchmarkLayout(b *testing.B) {
	url := serverURL(b)
	prefix := newPrefix(b, url)
	raw := rawClient(b, url)
	ctx := b.Context()
	for _, sc := range []*redis.Script{layoutReserve, layoutUpdate, layoutSwap} {
		if err := sc.Load(ctx, raw).Err(); err != nil {
			b.Fatal(err)
		}
	}
	fns := loadOneString(b, raw)
	names := []string{"floor", "hash", "string", "bare", "full-holder", "full-holder-bare", "full-string",
		"full-holder-batched", "full-holder-batched-delivered"}
	channels := make([]string, len(names))
	for i, name := range names {
		channels[i] = prefix + name + ":settled"
	}
	subscribe(b, raw, channels)
	for _, name := range names {
		p := prefix + name + ":"
		b.Run(name, func(b *testing.B) {
			if full, ok := strings.CutPrefix(name, "full-"); ok {
				benchLayout(b, raw, func(int) layoutExec {
					e := newOneStringExec(fns, p, full == "string")
					e.bare = full == "holder-bare"
					switch full {
					case "holder-batched":
						e.batched = [3]bool{true, true, true}
					case "holder-batched-delivered":
						e.batched[2] = true
					}
					return e
				})
				return
			}
			step := layoutStep(ctx, p, name)
			benchLayout(b, raw, func(n int) layoutExec { return stepFunc{step, n} })
		})
	}
}

// subscribe subscribes a client to channels, as a Store subscribes to
// its own, and reads their messages.
func subscribe(b *testing.B, raw *redis.Client, channels []string) {
	ps := raw.Subscribe(b.Context(), channels...)
	if _, err := ps.Receive(b.Context()); err != nil {
		b.Fatal(err)
	}
	ch := ps.Channel(redis.WithChannelSize(1 << 16))
	go func() {
		for range ch {
		}
	}()
	b.Cleanup(func() { ps.Close() })
}

// The scripts of the hash and string layouts: what each step must do at
// least, without the checks a store adds.
var (
	// layoutReserve claims the hash KEYS[1] if it holds no record, with
	// the TTL ARGV[1] and the fields ARGV[2...], and writes the index
	// KEYS[2].
	layoutReserve = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 'state', 'lease_until', 'owner', 'expires_at', 'fingerprint')
if h[1] then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], 'tag', 'PX', ARGV[1])
return 1`)
	// layoutUpdate moves the hash KEYS[1] to the state ARGV[1], appending
	// ARGV[2] to its history, and publishes an outcome.
	layoutUpdate = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 'state', 'history', 'retention', 'lease_until', 'owner', 'attached', 'id')
if not h[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'history', h[2] .. ARGV[2], 'expires_at', ARGV[3], 'lease_until', '')
if ARGV[1] == 'completed' then redis.call('PUBLISH', KEYS[2], h[7]) end
return 1`)
	// layoutSwap replaces the string KEYS[1] with ARGV[2] if it begins
	// with ARGV[1].
	layoutSwap = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, #ARGV[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1`)
)

// layoutStep returns the function queueing step of execution n in the
// layout named, its keys under prefix.
func layoutStep(ctx context.Context, prefix, layout string) func(p redis.Pipeliner, n, step int) {
	now := strconv.FormatInt(time.Now().UnixNano(), 10)
	id := fmt.Sprintf("exe_%026d", 0) // as long as a record.NewID
	hist := `[["accepted","` + now + `",""],["dispatched","` + now + `",""]]`
	blob := `{"state":"delivered","id":"` + id + `","key":"` + id + `","fingerprint":"` + id +
		`","tool":"charge_card","history":[["accepted","` + now + `",""],["dispatched","` + now +
		`",""],["completed","` + now + `",""],["delivered","` + now + `",""]],"attempts":1,` +
		`"retention":3600000000000,"owner":"bench","lease_until":"` + now + `","result":` +
		string(recordtest.ExecutionResult) + `}`
	fields := []any{time.Hour.Milliseconds(), "id", id, "key", id, "fingerprint", id, "actor", "", "scope", "",
		"upstream", "", "tool", "charge_card", "state", "dispatched", "history", hist, "attempts", "1",
		"attached", "0", "retention", "3600000000000", "expires_at", "", "owner", "bench", "lease_until", now}
	states := []string{"", "completed", "delivered"}
	return func(p redis.Pipeliner, n, step int) {
		k := prefix + fmt.Sprintf("{%032x}:r", n)
		switch {
		case layout == "floor":
			floorStep(ctx, p, prefix, n, step)
		case layout == "hash" && step == 0:
			layoutReserve.EvalSha(ctx, p, []string{k, prefix + "i:" + strconv.Itoa(n)}, fields...)
		case layout == "hash":
			entry := `,["` + states[step] + `","` + now + `",""]`
			layoutUpdate.EvalSha(ctx, p, []string{k, prefix + "settled"}, states[step], entry, now)
		case step == 0: // string, bare
			p.SetArgs(ctx, k, blob, redis.SetArgs{Mode: "NX", Get: true, TTL: time.Hour})
		case layout == "string":
			layoutSwap.EvalSha(ctx, p, []string{k}, blob[:8], blob, time.Hour.Milliseconds())
		default:
			p.SetArgs(ctx, k, blob, redis.SetArgs{Mode: "XX", TTL: time.Hour})
		}
	}
}

// A layoutExec is one new execution in a layout.
type layoutExec interface {
	// queue queues step's commands on p.
	queue(ctx context.Context, p redis.Pipeliner, step int)
	// done reads step's replies, once its pipeline ran.
	done(step int) error
}

// stepFunc is execution n of a layout whose steps send without reading.
type stepFunc struct {
	fill func(p redis.Pipeliner, n, step int)
	n    int
}

func (s stepFunc) queue(_ context.Context, p redis.Pipeliner, step int) { s.fill(p, s.n, step) }
func (s stepFunc) done(int) error                                       { return nil }

// benchLayout runs new executions of three steps each, every step's
// commands queued by the execution start makes and sent batched, 32
// goroutines a processor. It reports the server's CPU, and this
// process's (client-us/op), per execution, and the steps a batch.
func benchLayout(b *testing.B, raw *redis.Client, start func(n int) layoutExec) {
	type job struct {
		x    layoutExec
		step int
	}
	var batches atomic.Int64
	q := batch.Start(64, 2, func(ctx context.Context, calls []*batch.Call[job]) {
		batches.Add(1)
		p := &oneStringBatch{Pipeliner: raw.Pipeline()}
		for _, c := range calls {
			c.Job.x.queue(ctx, p, c.Job.step)
		}
		if err := p.exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			b.Error(err)
		}
	})
	defer q.Close()
	defer func() {
		if n := batches.Load(); n > 0 {
			b.ReportMetric(float64(3*b.N)/float64(n), "steps/batch")
		}
	}()
	defer reportServerCPU(b, raw)()
	defer reportClientCPU(b)()
	var next atomic.Int64
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			x := start(int(next.Add(1)))
			for step := range 3 {
				if err := q.Do(b.Context(), job{x, step}); err != nil {
					b.Error(err)
					return
				}
				if err := x.done(step); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
}
