package proxy

import "testing"

// TestReleaseLeavesTheNextCallsEntry: a tools/call passed upstream frees
// its id when its answer comes (releasePassedLocked), which may be before
// the goroutine that sent it releases it. A call the client sends under
// the id in between must keep its entry when the first is released.
func TestReleaseLeavesTheNextCallsEntry(t *testing.T) {
	s := &Session{calls: map[string]*clientCall{}}
	passed, next := &clientCall{s: s}, &clientCall{s: s}
	passed.req.Correlation, next.req.Correlation = "1", "1"
	s.mu.Lock()
	s.calls["1"] = passed
	s.releasePassedLocked("1", forwardedRequest{method: "tools/call"})
	s.calls["1"] = next
	s.mu.Unlock()
	if !passed.release() {
		t.Fatal("the passed call's release freed nothing")
	}
	if got := s.calls["1"]; got != next {
		t.Errorf("the entry under the id is %p after the passed call's release, want the next call's, %p", got, next)
	}
	if !next.release() || len(s.calls) != 0 {
		t.Errorf("the next call's release left %d entries", len(s.calls))
	}
}
