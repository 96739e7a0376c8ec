package proxy

import (
	"strconv"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// TestOwnSeq checks that only the id text send writes names one of the
// proxy's own requests, as when pending was keyed by that text: another
// spelling of the same number is no such id, while an escaped spelling
// of the text is (jsonrpc.IDKey reads it as the text).
func TestOwnSeq(t *testing.T) {
	for _, prefix := range []string{ownIDs, ownIDs + `a:`} {
		s := &Session{idPrefix: prefix}
		for _, n := range []int64{1, 9, 10, 1234567, 999999999999999999} {
			id := prefix + strconv.FormatInt(n, 10) + `"`
			if got, ok := s.ownSeq(jsonrpc.IDKey([]byte(id))); !ok || got != n {
				t.Errorf("ownSeq(%s) = %d, %v; want %d", id, got, ok, n)
			}
		}
		escaped := `"mcp\u002didempotent:` + prefix[len(ownIDs):] + `7"`
		if got, ok := s.ownSeq(jsonrpc.IDKey([]byte(escaped))); !ok || got != 7 {
			t.Errorf("ownSeq(%s) = %d, %v; want 7", escaped, got, ok)
		}
		for _, tail := range []string{`"`, `0"`, `07"`, `+7"`, `-7"`, `7 "`, `7a"`, `1e3"`,
			`7`, `1000000000000000000"`, `99999999999999999999"`} {
			id := prefix + tail
			if got, ok := s.ownSeq(jsonrpc.IDKey([]byte(id))); ok {
				t.Errorf("ownSeq(%s) = %d, true; want no request's", id, got)
			}
		}
		for _, id := range []string{`7`, `"7"`, `null`, `"mcp-idempotent"`, ownIDs[:len(ownIDs)-1] + `7"`} {
			if got, ok := s.ownSeq(jsonrpc.IDKey([]byte(id))); ok {
				t.Errorf("ownSeq(%s) = %d, true; want no request's", id, got)
			}
		}
	}
}
