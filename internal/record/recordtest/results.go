package recordtest

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// testOutcomeNotUTF8: an upstream's result or error may hold bytes that
// are not UTF-8 in a string. The outcome is recorded all the same, and
// what is read back decodes as the upstream's answer does: a store that
// cannot keep such bytes keeps U+FFFD for each, as a JSON decoder reads
// them. An outcome no store takes could never be recorded, and its
// callers would wait for it until the session ended.
func testOutcomeNotUTF8(t *testing.T, s record.Store, _ *Clock) {
	result := json.RawMessage("{\"content\":[{\"type\":\"text\",\"text\":\"\xff\xfe bad \xe2\x82 \xef\xbf\xbd\"}]}")
	rpcErr := json.RawMessage("{\"code\":-32000,\"message\":\"no \xc0\"}")
	for _, tc := range []struct {
		name   string
		change record.Change
		got    func(*record.Record) json.RawMessage
	}{
		{"result", record.Change{To: record.Completed, Result: result}, func(r *record.Record) json.RawMessage { return r.Result }},
		{"error", record.Change{To: record.Failed, Error: rpcErr}, func(r *record.Record) json.RawMessage { return r.Error }},
	} {
		r, _ := mustReserve(t, s, newRecord("k-"+tc.name), record.ReserveOptions{Dispatch: true})
		updated, err := s.Update(t.Context(), r.ID, tc.change)
		if err != nil {
			t.Fatalf("recording a %s that is not UTF-8: %v", tc.name, err)
		}
		stored, err := s.Get(t.Context(), r.ID)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		sent := tc.change.Result
		if sent == nil {
			sent = tc.change.Error
		}
		var want any
		if err := json.Unmarshal(sent, &want); err != nil {
			t.Fatal(err)
		}
		for from, rec := range map[string]*record.Record{"Update": updated, "Get": stored} {
			var got any
			if err := json.Unmarshal(tc.got(rec), &got); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("the %s as %s returns it is %q (%v); want what decodes as %q does", tc.name, from, tc.got(rec), err, sent)
			}
		}
	}
}
