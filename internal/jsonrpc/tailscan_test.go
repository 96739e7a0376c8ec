package jsonrpc

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// FuzzTailScan checks a TailScan against encoding/json on every object it
// takes whole, fed in two parts split anywhere (a string, an escape or a
// member name may cross a read): it follows the object to its end, and
// finds each top-level "id" (compacted, up to maxScanIDs of up to
// maxTailID bytes) and "method" that encoding/json reads.
func FuzzTailScan(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","result":{"id":1,"t":"x\"}"},"id":"a\\"}`), uint16(20))
	f.Add([]byte(`{"\u0069d" : [ 1, {"a" : 2} ] , "id":3}`), uint16(3))
	f.Add([]byte(`{"params":[[[]]],"method":"x","id":null}`), uint16(9))
	f.Add([]byte(`{"id":"\ud83d\ude00 \"\\"}`), uint16(12))
	f.Fuzz(func(t *testing.T, frame []byte, at uint16) {
		if !json.Valid(frame) {
			return
		}
		wantIDs, wantMethod, ok := topMembers(frame)
		if !ok {
			return // not an object
		}
		var s TailScan
		cut := int(at) % (len(frame) + 1)
		s.Scan(frame[:cut])
		s.Scan(frame[cut:])
		if s.broken || len(s.open) != 0 {
			t.Fatalf("%q: broken %v, %d brackets open; want it followed to its end", frame, s.broken, len(s.open))
		}
		var got [][]byte
		for _, id := range s.ids {
			got = append(got, id.val)
		}
		if !slices.EqualFunc(got, wantIDs, bytes.Equal) || s.method != wantMethod {
			t.Fatalf("%q: ids %q, method %v; want %q, %v", frame, got, s.method, wantIDs, wantMethod)
		}
	})
}

// topMembers returns, as a TailScan keeps them, the "id" members of the
// object frame, and whether it has a "method"; ok is false if frame is
// not an object.
func topMembers(frame []byte) (ids [][]byte, method, ok bool) {
	var members [][2]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(frame))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			panic(err) // frame is valid JSON
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			panic(err)
		}
		name, _ := json.Marshal(tok)
		members = append(members, [2]json.RawMessage{name, v})
	}
	for _, m := range members {
		switch string(m[0]) {
		case `"method"`:
			method = true
		case `"id"`:
			var b bytes.Buffer
			json.Compact(&b, m[1])
			if b.Len() <= maxTailID && len(ids) < maxScanIDs {
				ids = append(ids, b.Bytes())
			}
		}
	}
	return ids, method, true
}
