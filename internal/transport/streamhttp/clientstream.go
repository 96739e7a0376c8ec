package streamhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"
)

// maxResumes bounds the attempts in a row to resume a broken stream that
// bring no new event.
const maxResumes = 5

// relayStream delivers the message events of resp, the SSE stream
// answering a POST, until every request in pending is answered. A stream
// that ends first is resumed with GET and Last-Event-ID (spec 2025-11-25,
// "Resumability and Redelivery"): losing the connection must not lose
// the answer. Only a resumable stream is: 2026-07-28 has no GET and no
// resumption (spec 2026-07-28, basic/transports/streamable-http,
// "Receiving Messages").
// It reports whether a message over the size limit was dropped, and
// whether a resumption met a 404 for the session: the caller then answers
// pending, and ends the session (expire).
func (c *Client) relayStream(resp *http.Response, pending map[string]json.RawMessage, resumable bool) (dropped, gone bool) {
	st := dropState{resp: resp}
	body := resp.Body
	r := newSSEReader(body, c.max)
	lastID, retry := "", -1
	// failures counts the resumptions in a row that read no event;
	// quiet, those that read events but no message (a server that closes
	// its stream while it works, after a priming event, so that the
	// client polls: SEP-1699). A quiet server is alive, and is not given
	// up on, but it is not asked again at once either.
	for failures, quiet := 0, 0; ; {
		if r != nil {
			events, messages, err := c.relaySSE(r, pending, &st)
			body.Close()
			if err != nil {
				c.log.Debug("the upstream's event stream broke", "err", err)
			}
			switch {
			case messages > 0:
				failures, quiet = 0, 0
			case events > 0:
				failures = 0
				quiet++
			}
			lastID, retry = r.lastID, r.retry
		}
		if len(pending) == 0 || c.ctx.Err() != nil || !resumable || st.lost {
			return st.dropped, false
		}
		if lastID == "" {
			c.log.Warn("the upstream's event stream ended before the answer and has no event id to resume from")
			return st.dropped, false
		}
		if failures++; failures > maxResumes {
			c.log.Warn("giving up resuming the upstream's event stream", "attempts", maxResumes)
			return st.dropped, false
		}
		if wait := resumeWait(failures, quiet, retry); wait > 0 && !c.sleep(wait) {
			return st.dropped, false
		}
		got, err := c.get(lastID)
		var se *statusError
		switch {
		case c.sessionGone(err):
			c.log.Warn("the upstream forgot the session (HTTP 404) when its event stream was resumed")
			return st.dropped, true
		case errors.As(err, &se) && !transient(se.status):
			c.log.Warn("the upstream refused to resume its event stream", "err", err)
			return st.dropped, false
		case err != nil:
			// The server may not have seen the old stream go yet (the
			// go-sdk answers 409 until then), or the network is down.
			c.log.Debug("resuming the upstream's event stream", "err", err, "attempt", failures)
			r = nil
			continue
		}
		body = got.Body
		r = newSSEReader(body, c.max)
		r.lastID, r.retry = lastID, retry
	}
}

// resumeWait is the pause before a resumption: what the server asked for
// with the SSE retry field (at least minQuietWait after a quiet stream);
// else none after a stream that broke with messages read (failures 1,
// quiet 0), a doubling from 250ms for attempt failures from 2, and after
// quiet streams in a row a doubling from minQuietWait up to maxQuietWait.
func resumeWait(failures, quiet, retryMS int) time.Duration {
	switch {
	case retryMS >= 0 && quiet > 0:
		// A server asking for no pause between polls would have its
		// client spin.
		return max(serverRetry(retryMS), minQuietWait)
	case retryMS >= 0:
		return serverRetry(retryMS)
	case failures > 1:
		return 250 * time.Millisecond << (failures - 2)
	case quiet > 0:
		return min(minQuietWait<<min(quiet-1, 8), maxQuietWait)
	}
	return 0
}

// minQuietWait is the least pause before asking a quiet server again.
const minQuietWait = 250 * time.Millisecond

// maxQuietWait bounds the pause before asking a quiet server again.
const maxQuietWait = 5 * time.Second

// maxServerRetry bounds the reconnection delay a server may ask for with
// the SSE retry field: a huge value would overflow a Duration, or park the
// stream for ever.
const maxServerRetry = time.Minute

func serverRetry(ms int) time.Duration {
	if ms > int(maxServerRetry/time.Millisecond) {
		return maxServerRetry
	}
	return time.Duration(ms) * time.Millisecond
}

// transient reports whether an HTTP status refusing a resumption may go
// away by itself.
func transient(status int) bool {
	return status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500
}

// sleep waits for d, and reports false if the Client was closed first.
func (c *Client) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
		return false
	case <-c.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// get opens an event stream with GET, resuming after lastID if it is set.
// Any answer but a 2xx event stream is an error.
func (c *Client) get(lastID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.setHeadersLocked(req, false)
	c.mu.Unlock()
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set(headerLastEventID, lastID)
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode/100 != 2 || ct != "text/event-stream" {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, &statusError{resp.StatusCode, ct}
	}
	c.mu.Lock()
	c.getServed = true
	c.mu.Unlock()
	return resp, nil
}

// sessionGone reports whether err, from get, is a 404 for a session whose
// GETs the server served before. Spec, "Session Management": a 404 to a
// request with the session id means the session is gone. Without an
// earlier GET served, a 404 may only say that GET is not routed.
func (c *Client) sessionGone(err error) bool {
	var se *statusError
	if !errors.As(err, &se) || se.status != http.StatusNotFound {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.getServed && c.sessionID != ""
}

// expireIdle ends the session unless a POST is under way: that one meets
// the 404 too, and ends it once its requests are answered, so that none is
// taken for sent and unanswered. Nothing is POSTed after.
func (c *Client) expireIdle() {
	c.mu.Lock()
	idle := c.posts == 0
	c.gone = c.gone || idle
	c.mu.Unlock()
	if idle {
		c.expire()
	}
}

// endSession notes that the server forgot the session, as a POST under
// way found: nothing more is POSTed, and the session ends once the last
// POST under way is done. Each of those has its own outcome, an answer,
// a 404 (it did not run) or a broken stream (it may have): ending the
// session at once would have them all taken for sent and unanswered.
func (c *Client) endSession() {
	c.mu.Lock()
	c.gone = true
	c.mu.Unlock()
}

// expire makes ReadFrame report ErrSessionExpired once the frames already
// queued are read, so that the proxy starts a new session.
func (c *Client) expire() {
	c.expiredOnce.Do(func() { close(c.expired) })
}

// A statusError is an answer to GET other than a 2xx event stream.
type statusError struct {
	status      int
	contentType string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("HTTP %d, Content-Type %q", e.status, e.contentType)
}

// relaySSE delivers the message events of r until it ends, or, if
// pending holds requests, until the last of them is answered; it returns
// how many events it read and how many of them were messages. pending
// may be nil. A message over the size limit is dropped (dropTooLarge),
// and noted in st. The error is nil at a clean end of stream.
func (c *Client) relaySSE(r *sseReader, pending map[string]json.RawMessage, st *dropState) (events, messages int, err error) {
	for ; ; events++ {
		ev, err := r.next()
		if err == io.EOF {
			return events, messages, nil
		}
		if err != nil {
			return events, messages, err
		}
		if ev.ID != "" {
			c.mu.Lock()
			c.lastEventID = ev.ID
			c.mu.Unlock()
		}
		if len(bytes.TrimSpace(ev.Data)) == 0 {
			// An event id with empty data: the priming event a server
			// sends first, so that the stream can be resumed before its
			// first message (MCP 2025-11-25). Nothing to deliver.
			continue
		}
		if ev.Type != "message" {
			continue
		}
		messages++
		waiting := len(pending)
		var more bool
		if ev.TooLarge {
			more = c.dropTooLarge(ev.Data, ev.Late, pending, st)
		} else {
			more = c.deliver(ev.Data, pending)
		}
		if !more || waiting > 0 && len(pending) == 0 {
			// Closed; or the POST's last request is answered, after
			// which its server should close the stream (spec
			// 2025-11-25). One that keeps it open must not keep the
			// POST under way: a session with a POST under way never
			// ends when the server forgets it (expireIdle).
			return events, messages, nil
		}
	}
}

// maxListenWait bounds the pause before opening the GET stream again
// after a failure.
const maxListenWait = 30 * time.Second

// listen keeps the GET stream open for server-to-client messages until
// Close, reconnecting, with Last-Event-ID once it has one, when the server
// ends it or it cannot be opened for a while (a network error, 409, 429 or
// a 5xx), and without when the server refuses to resume it.
func (c *Client) listen() {
	defer c.wg.Done()
	lastID := ""
	for failures := 0; ; {
		resp, err := c.get(lastID)
		var se *statusError
		switch {
		case err != nil && c.ctx.Err() != nil:
			return
		case errors.As(err, &se) && se.status == http.StatusMethodNotAllowed:
			// Spec: the server offers no stream at this endpoint.
			c.log.Debug("the upstream offers no GET stream")
			return
		case c.sessionGone(err):
			// The server restarted and forgot the session: a new one now,
			// rather than a call failing on it first.
			c.log.Warn("the upstream forgot the session (HTTP 404) when its GET stream was opened again")
			c.expireIdle()
			return
		case errors.As(err, &se) && !transient(se.status) && lastID != "":
			// The server cannot resume after lastID (it no longer holds
			// those events, say): the stream is opened afresh, without
			// what it missed, rather than lost for the session's life.
			c.log.Warn("the upstream refused to resume its GET stream; opening it afresh", "err", err)
			lastID = ""
			continue
		case errors.As(err, &se) && !transient(se.status):
			c.log.Warn("opening the upstream's GET stream", "err", err)
			return
		case err != nil:
			// The server may be restarting, or the network down: else
			// the server's own messages stop for the session's life.
			wait := min(time.Second<<min(failures, 5), maxListenWait)
			if failures++; failures == 1 {
				c.log.Warn("opening the upstream's GET stream; trying again", "err", err, "in", wait)
			} else {
				c.log.Debug("opening the upstream's GET stream; trying again", "err", err, "in", wait)
			}
			if !c.sleep(wait) {
				return
			}
			continue
		}
		failures = 0
		r := newSSEReader(resp.Body, c.max)
		r.lastID = lastID
		if _, _, err := c.relaySSE(r, nil, &dropState{}); err != nil && c.ctx.Err() == nil {
			c.log.Debug("the upstream's GET stream broke", "err", err)
		}
		resp.Body.Close()
		lastID = r.lastID
		wait := time.Second
		if r.retry >= 0 {
			// At least minQuietWait: a server asking for no pause, whose
			// stream ends at once, would have the Client spin.
			wait = max(serverRetry(r.retry), minQuietWait)
		}
		if !c.sleep(wait) {
			return
		}
	}
}
