package streamhttp

import (
	"net/http"
	"time"
)

// DefaultKeepAlive is ServerOptions.KeepAlive's default, the TypeScript
// SDK's interval. It is well inside the 300 s after which Node's fetch
// (undici's bodyTimeout) drops a response that sends nothing, and the
// 60 s of common reverse proxies: a long tool call would else lose its
// stream.
const DefaultKeepAlive = 15 * time.Second

// keepAliveComment is an SSE comment, which every parser skips (WHATWG
// HTML, "Server-sent events", section 9.2.6). It has no id field, so it
// is no event: the client's Last-Event-ID stays the last real event's.
var keepAliveComment = []byte(": keep-alive\n\n")

// A keepAlive times the comments of one SSE response: one each time the
// response has written nothing for its interval. It starts no goroutine:
// its writer waits on its channel with the rest.
type keepAlive struct {
	every time.Duration
	t     *time.Timer // nil when keep-alives are off
}

// newKeepAlive starts the clock of a response whose headers have just
// gone out; every <= 0 turns keep-alives off.
func newKeepAlive(every time.Duration) *keepAlive {
	k := &keepAlive{every: every}
	if every > 0 {
		k.t = time.NewTimer(every)
	}
	return k
}

// due fires when a comment is due; never, when keep-alives are off.
func (k *keepAlive) due() <-chan time.Time {
	if k.t == nil {
		return nil
	}
	return k.t.C
}

// wrote restarts the clock: the response has just written bytes.
func (k *keepAlive) wrote() {
	if k.t != nil {
		k.t.Reset(k.every)
	}
}

func (k *keepAlive) stop() {
	if k.t != nil {
		k.t.Stop()
	}
}

// send writes the comment and flushes it, and restarts the clock. It
// reports false when the client has gone.
func (k *keepAlive) send(w http.ResponseWriter, r *http.Request, flusher http.Flusher) bool {
	if _, err := w.Write(keepAliveComment); err != nil {
		return false
	}
	if flusher != nil {
		flusher.Flush()
	}
	k.wrote()
	return r.Context().Err() == nil
}
