package redisstore_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// oneString runs the one-string layout's functions, from a library of
// its own, loaded for the benchmark and deleted after it.
type oneString struct {
	reserve, update, batch string // the functions' names
}

func loadOneString(b testing.TB, raw *redis.Client) oneString {
	buf := make([]byte, 6)
	_, _ = rand.Read(buf)
	name := "mcpi_layoutbench_" + hex.EncodeToString(buf)
	code := strings.ReplaceAll(oneStringLib(name), "register_function('", "register_function('"+name+"_")
	if err := raw.FunctionLoad(b.Context(), code).Err(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := raw.FunctionDelete(context.Background(), name).Err(); err != nil {
			b.Errorf("deleting the library %s: %v", name, err)
		}
	})
	return oneString{reserve: name + "_reserve", update: name + "_update", batch: name + "_batch"}
}

// oneStringExec is one new execution in the layout, as its client keeps
// it: its copy of the record, and the reply it waits for.
type oneStringExec struct {
	fns    oneString
	prefix string
	apart  bool // full-string: the record at its own key, the holder key apart
	bare   bool // full-holder-bare: reserved with two commands, no script
	id     string
	key    string
	tag    string
	owner  string
	fp     string

	state     record.State
	version   int
	attempts  int
	lease     time.Time
	expires   time.Time
	retention time.Duration
	keysUntil int64 // unix ms
	attached  int64

	// batched says which steps go in their batch's one call of the batch
	// function (full-holder-batched), not in a call of their own.
	batched  [3]bool
	leaseFor time.Duration // the reservation's lease
	replace  string        // the states the reservation replaces, as ",a,b,"
	cmd      *redis.Cmd
	reply    any              // the reply of a step sent in a batch call
	claim    *redis.StatusCmd // full-holder-bare's reservation
	index    *redis.StatusCmd
}

func newOneStringExec(fns oneString, prefix string, apart bool) *oneStringExec {
	id := record.NewID(time.Now())
	sum := sha256.Sum256([]byte(id))
	return &oneStringExec{fns: fns, prefix: prefix, apart: apart, id: id, key: id,
		tag: hex.EncodeToString(sum[:16]), owner: "bench", fp: id, retention: time.Hour,
		leaseFor: time.Minute, replace: ","}
}

// pad appends n in exactly w decimal digits.
func pad(b []byte, n int64, w int) []byte {
	var d [20]byte
	s := strconv.AppendInt(d[:0], n, 10)
	for range w - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// header writes e's header.
func (e *oneStringExec) header() string {
	b := make([]byte, 0, hdrFixed+len(e.id)+len(e.owner)+len(e.fp))
	b = append(b, '1', stateCode[e.state])
	b = pad(b, int64(e.version), 4)
	b = pad(b, int64(e.attempts), 4)
	b = pad(b, unixNano(e.lease), 19)
	b = pad(b, unixNano(e.expires), 19)
	b = pad(b, int64(e.retention), 19)
	b = append(b, '-')
	b = pad(b, e.keysUntil, 13)
	b = pad(b, e.attached, 10)
	b = pad(b, int64(len(e.id)), 3)
	b = pad(b, int64(len(e.owner)), 3)
	b = pad(b, int64(len(e.fp)), 3)
	b = append(b, e.id...)
	b = append(b, e.owner...)
	b = append(b, e.fp...)
	return string(b)
}

// chunk appends a chunk of kind c holding the JSON j.
func chunk(b []byte, c byte, j []byte) []byte {
	b = append(b, c)
	b = pad(b, int64(len(j)), 6)
	return append(b, j...)
}

// transition appends a chunk of a transition to s at at.
func transition(b []byte, s record.State, at time.Time) []byte {
	var j [64]byte
	t := append(j[:0], `["`...)
	t = append(t, s...)
	t = append(t, `","`...)
	t = strconv.AppendInt(t, at.UnixNano(), 10)
	t = append(t, `",""]`...)
	return chunk(b, 't', t)
}

// fixed appends the chunk of e's fields that never change.
func (e *oneStringExec) fixed(b []byte) []byte {
	j := []byte{'{'}
	for i, f := range [...][2]string{{"key", e.key}, {"actor", ""}, {"scope", ""}, {"upstream", ""}, {"tool", "charge_card"}} {
		if i > 0 {
			j = append(j, ',')
		}
		j = strconv.AppendQuote(append(strconv.AppendQuote(j, f[0]), ':'), f[1])
	}
	return chunk(b, 'b', append(j, '}'))
}

func (e *oneStringExec) holderKey() string { return e.prefix + "{" + e.tag + "}:k" }
func (e *oneStringExec) recordKey() string { return e.prefix + "{" + e.tag + "}:r:" + e.id }
func (e *oneStringExec) indexKey() string  { return e.prefix + "i:" + e.id }

// queue queues step's script on p: 0, the reservation with its dispatch;
// 1, completed, fenced to its owner; 2, delivered, from completed, as
// the proxy makes them.
func (e *oneStringExec) queue(ctx context.Context, p redis.Pipeliner, step int) {
	at := time.Now()
	if step == 0 {
		e.state, e.version, e.attempts = record.Dispatched, 2, 1
		e.lease = at.Add(e.leaseFor)
		ttl := e.retention + time.Minute + e.lease.Sub(at)
		e.keysUntil = at.Add(ttl).UnixMilli()
		body := transition(e.fixed(nil), record.Accepted, at)
		body = transition(body, record.Dispatched, at)
		if e.bare {
			e.cmd = nil
			e.claim = p.SetArgs(ctx, e.holderKey(), e.header()+string(body), redis.SetArgs{Mode: "NX", Get: true, TTL: ttl})
			e.index = p.SetArgs(ctx, e.indexKey(), e.tag, redis.SetArgs{Mode: "NX", TTL: ttl})
			return
		}
		holds := ""
		if e.apart {
			holds = e.id
		}
		e.send(ctx, p, step, []string{e.holderKey(), e.indexKey()},
			string(pad(nil, at.UnixNano(), 19)), e.prefix+"settled", e.prefix+"{"+e.tag+"}:r:", e.replace, e.fp,
			e.header()+string(body), ttl.Milliseconds(), e.tag, holds)
		return
	}
	to, from, holder := record.Completed, "", e.owner
	var chunks []byte
	if step == 1 {
		chunks = chunk(nil, 'r', recordtest.ExecutionResult)
	} else {
		to, from, holder = record.Delivered, string(stateCode[record.Completed]), ""
	}
	chunks = transition(chunks, to, at)
	known := string(pad(nil, int64(e.version), 4))
	e.state, e.version = to, e.version+1
	e.lease, e.expires = time.Time{}, at.Add(e.retention)
	end := string(pad(nil, at.Add(e.retention+time.Minute).UnixMilli(), 13))
	keys := []string{e.holderKey(), e.recordKey(), e.indexKey()}
	if e.apart {
		keys = []string{e.recordKey(), e.recordKey(), e.indexKey(), e.holderKey()}
	}
	e.send(ctx, p, step, keys, e.prefix+"settled", e.id, known, from, holder, "",
		e.header()[:68], string(chunks), end, "")
}

// send queues step's function on p, or, if step is batched, adds its
// keys and arguments to p's batch call (a oneStringBatch).
func (e *oneStringExec) send(ctx context.Context, p redis.Pipeliner, step int, keys []string, args ...any) {
	fn, kind := e.fns.reserve, "r"
	if step > 0 {
		fn, kind = e.fns.update, "u"
	}
	if !e.batched[step] {
		e.cmd = p.FCall(ctx, fn, keys, args...)
		return
	}
	bp := p.(*oneStringBatch)
	e.cmd, e.reply = nil, nil
	bp.keys = append(bp.keys, keys...)
	bp.args = append(append(bp.args, kind), args...)
	bp.in = append(bp.in, e)
}

// oneStringBatch is a pipeline that also gathers the steps of executions
// batched for them into one call of the batch function.
type oneStringBatch struct {
	redis.Pipeliner
	keys []string
	args []any
	in   []*oneStringExec // the executions whose steps the call makes
}

// exec sends the pipeline, the batch call last, and gives each
// execution in that call its reply.
func (p *oneStringBatch) exec(ctx context.Context) error {
	var cmd *redis.Cmd
	if len(p.in) > 0 {
		cmd = p.FCall(ctx, p.in[0].fns.batch, p.keys, p.args...)
	}
	_, err := p.Exec(ctx)
	if cmd == nil {
		return err
	}
	v, cerr := cmd.Slice()
	for i, e := range p.in {
		switch {
		case cerr != nil:
			e.reply = cerr
		case i < len(v):
			e.reply = v[i]
		default:
			e.reply = fmt.Errorf("batch call: %d replies for %d steps", len(v), len(p.in))
		}
	}
	p.keys, p.args, p.in = p.keys[:0], p.args[:0], p.in[:0]
	return err
}

// result returns the reply of the step last sent.
func (e *oneStringExec) result() ([]any, error) {
	if e.cmd != nil {
		return e.cmd.Slice()
	}
	switch r := e.reply.(type) {
	case []any:
		return r, nil
	case error:
		return nil, r
	}
	return nil, fmt.Errorf("reply %v (%T)", e.reply, e.reply)
}

// done reads the reply of the step queue sent.
func (e *oneStringExec) done(step int) error {
	if step == 0 && e.bare {
		// A holder found (rare) would be settled, replaced or matched
		// by the reserve function, in a second round trip that also
		// deletes the index written if this one lost.
		if err := e.claim.Err(); !errors.Is(err, redis.Nil) {
			return fmt.Errorf("reserving %s: a holder (%v)", e.id, err)
		}
		return e.index.Err()
	}
	v, err := e.result()
	if err != nil {
		return err
	}
	if step == 0 {
		if won, _ := v[0].(int64); won != 1 {
			return fmt.Errorf("reserving %s: %v", e.id, v)
		}
		return nil
	}
	if len(v) != 3 || v[0] != "applied" {
		return fmt.Errorf("updating %s: %v", e.id, v)
	}
	attached, _ := v[1].(string)
	if e.attached, err = strconv.ParseInt(attached, 10, 64); err != nil {
		return err
	}
	return nil
}

// TestOneStringLayout runs the one-string layout's functions through
// each of their paths, so that BenchmarkLayout measures a layout that
// works.
func TestOneStringLayout(t *testing.T) {
	for _, c := range []struct {
		name           string
		apart, batched bool
	}{{"holder", false, false}, {"string", true, false}, {"holder-batched", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			testOneString(t, c.apart, c.batched)
		})
	}
}

// testOneString runs the paths of the layout apart or not, each step
// sent in a call of its own or, if batched, through the batch function.
func testOneString(t *testing.T, apart, batched bool) {
	url := serverURL(t)
	raw := rawClient(t, url)
	prefix := newPrefix(t, url)
	ctx := t.Context()
	fns := loadOneString(t, raw)
	// send sends e's step alone.
	send := func(e *oneStringExec, n int) {
		t.Helper()
		p := &oneStringBatch{Pipeliner: raw.Pipeline()}
		e.queue(ctx, p, n)
		if err := p.exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// step sends e's step alone and returns its reply.
	step := func(e *oneStringExec, n int) []any {
		t.Helper()
		send(e, n)
		v, err := e.result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	stored := func(e *oneStringExec) string {
		t.Helper()
		k := e.recordKey()
		if !apart && raw.Get(ctx, e.holderKey()).Val()[hdrFixed:hdrFixed+len(e.id)] == e.id {
			k = e.holderKey()
		}
		return raw.Get(ctx, k).Val()
	}
	newExec := func() *oneStringExec {
		e := newOneStringExec(fns, prefix, apart)
		e.batched = [3]bool{batched, batched, batched}
		return e
	}

	// A new execution.
	e := newExec()
	for n := range 3 {
		step(e, n)
		if err := e.done(n); err != nil {
			t.Fatalf("step %d: %v", n, err)
		}
	}
	got := stored(e)
	if got[:10] != "1v00040001" || got[10:29] != strings.Repeat("0", 19) {
		t.Errorf("delivered: header %q, want delivered, version 4, 1 attempt, no lease", got[:100])
	}
	log := got[hdrFixed+len(e.id)+len(e.owner)+len(e.fp):]
	var kinds string
	for len(log) > 0 {
		n, err := strconv.Atoi(log[1:7])
		if err != nil {
			t.Fatalf("log %q: %v", log, err)
		}
		kinds, log = kinds+log[:1], log[7+n:]
	}
	if kinds != "bttrtt" {
		t.Errorf("log chunks %q, want bttrtt", kinds)
	}
	if tag := raw.Get(ctx, e.indexKey()).Val(); tag != e.tag {
		t.Errorf("index: %q, want %q", tag, e.tag)
	}
	for _, k := range []string{e.holderKey(), e.indexKey()} {
		if ttl := raw.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s: TTL %v", k, ttl)
		}
	}

	// The same key again: the record holds it.
	again := newExec()
	again.key, again.tag, again.fp = e.key, e.tag, e.fp
	if v := step(again, 0); v[0] != int64(0) || v[2] != got {
		t.Errorf("reserving a held key: %v, want 0 and the holder", v)
	}
	// The same key, delivered replaceable: a new record holds it, and
	// the one replaced is still found by its id.
	again.replace = ",v,"
	if v := step(again, 0); v[0] != int64(1) {
		t.Errorf("reserving a replaceable key: %v, want 1", v)
	}
	if s := stored(e); s != got {
		t.Errorf("the record replaced: %q, want %q", s, got)
	}
	// The same id again: taken.
	again.key, again.tag = "other", "0123"
	if v := step(again, 0); v[0] != int64(-1) {
		t.Errorf("reserving an id taken: %v, want -1", v)
	}

	// Fenced to another owner, from another state, at another version.
	f := newExec()
	step(f, 0)
	f.owner = "another"
	if v := step(f, 1); v[0] != "conflict" {
		t.Errorf("completing fenced to another owner: %v, want conflict", v[0])
	}
	f.owner, f.version = "bench", 2
	send(f, 2) // delivered from completed, while dispatched
	if v, _ := f.result(); v[0] != "conflict" {
		t.Errorf("delivering from completed a dispatched record: %v, want conflict", v[0])
	}
	f.version = 7
	if v := step(f, 1); v[0] != "stale" {
		t.Errorf("completing at another version: %v, want stale", v[0])
	}
	// An id no record has.
	g := newExec()
	g.version = 2
	if v := step(g, 1); v[0] != "notfound" {
		t.Errorf("completing an unknown id: %v, want notfound", v[0])
	}

	// An orphan: its lease lapsed, and the next reservation settles it.
	o := newExec()
	o.leaseFor = -time.Second
	step(o, 0)
	next := newExec()
	next.key, next.tag, next.fp = o.key, o.tag, o.fp
	v := step(next, 0)
	if v[0] != int64(0) || v[1] != o.id {
		t.Fatalf("reserving an orphan's key: %v, want 0 and the orphan settled", v)
	}
	if s, _ := v[2].(string); s[:6] != "1u0003" || !strings.Contains(s, "went away") {
		t.Errorf("the orphan settled: %q, want unknown, version 3, the note", s)
	}
}

// TestOneStringBatch sends the steps of several records in one call of
// the batch function, beside a step in a call of its own: each record
// gets its own reply, and one whose step fails does not fail the rest.
func TestOneStringBatch(t *testing.T) {
	url := serverURL(t)
	raw := rawClient(t, url)
	prefix := newPrefix(t, url)
	ctx := t.Context()
	fns := loadOneString(t, raw)
	newExec := func(batched [3]bool) *oneStringExec {
		e := newOneStringExec(fns, prefix, false)
		e.batched = batched
		return e
	}
	all := [3]bool{true, true, true}
	a, b, bad, c := newExec(all), newExec(all), newExec(all), newExec(all)
	d := newExec([3]bool{false, false, true}) // delivered batched only
	// bad's holder key holds a hash: its reservation fails (WRONGTYPE).
	if err := raw.HSet(ctx, bad.holderKey(), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	type job struct {
		e    *oneStringExec
		step int
	}
	run := func(jobs ...job) {
		t.Helper()
		p := &oneStringBatch{Pipeliner: raw.Pipeline()}
		for _, j := range jobs {
			j.e.queue(ctx, p, j.step)
		}
		if err := p.exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	done := func(name string, e *oneStringExec, step int) {
		t.Helper()
		if err := e.done(step); err != nil {
			t.Errorf("%s, step %d: %v", name, step, err)
		}
	}

	run(job{a, 0})
	done("a", a, 0)
	run(job{a, 1}, job{b, 0}, job{d, 0}, job{bad, 0}, job{c, 0})
	done("a", a, 1)
	done("b", b, 0)
	done("d", d, 0)
	done("c", c, 0)
	if err := bad.done(0); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("reserving at a hash: %v, want WRONGTYPE", err)
	}
	run(job{a, 2}, job{b, 1}, job{c, 1}, job{d, 1})
	for _, j := range []job{{a, 2}, {b, 1}, {c, 1}, {d, 1}} {
		done(j.e.id, j.e, j.step)
	}
	run(job{b, 2}, job{c, 2}, job{d, 2})
	for _, e := range []*oneStringExec{a, b, c, d} {
		done(e.id, e, 2)
		if h := raw.GetRange(ctx, e.holderKey(), 0, 9).Val(); h != "1v00040001" {
			t.Errorf("%s: header %q, want delivered, version 4, 1 attempt", e.id, h)
		}
	}
}
