package jsonrpc

import (
	"encoding/json"
	"testing"
)

func TestNoAnswerObject(t *testing.T) {
	for _, tt := range []struct {
		na      NoAnswer
		refused bool
		want    string
	}{
		{NoAnswer{NotSent: true, Reason: "upstream unreachable: connection refused"}, false,
			`{"code":-32603,"message":"upstream unreachable: connection refused"}`},
		{NoAnswer{Status: 202, Reason: "accepted"}, false,
			`{"code":-32603,"message":"accepted","data":{"http_status":202}}`},
		{NoAnswer{Status: 503, RetryAfter: "2", Reason: "upstream answered HTTP 503"}, true,
			`{"code":-32603,"message":"upstream answered HTTP 503","data":{"http_status":503,"retry_after":"2"}}`},
		{NoAnswer{Status: 429, RetryAfter: `"<1>"`, Reason: "busy"}, true,
			`{"code":-32603,"message":"busy","data":{"http_status":429,"retry_after":"\"\u003c1\u003e\""}}`},
	} {
		if got := string(tt.na.Object().Object()); got != tt.want {
			t.Errorf("%+v: Object = %s, want %s", tt.na, got, tt.want)
		}
		if got := tt.na.Refused(); got != tt.refused {
			t.Errorf("%+v: Refused = %v, want %v", tt.na, got, tt.refused)
		}
	}
}

func TestPortableID(t *testing.T) {
	for _, tt := range []struct {
		id   string
		want bool
	}{
		{`1`, true},
		{`-5`, true},
		{`5.0`, true},
		{`999999999999999`, true},
		{`-999999999999999`, true},
		{`1000000000000000`, true},
		{`-0`, true},
		{`9007199254740991`, true},
		{`-9007199254740991`, true},
		{`9007199254740993`, false},
		{`9223372036854775808`, false},
		{`123456789012345678901234567890`, false},
		{`1e400`, false},
		{`"abc"`, true},
		{`""`, true},
		{`"\u00e9\n"`, true},
		{`"\ud83d\ude00"`, true},
		{`"\\ud800"`, true}, // a backslash, then the letters
		{`"\ud800"`, false},
		{`"a\udc00"`, false},
		{`"\ud800x"`, false},
		{`"\ud800\u0041"`, false},
		{`"\ude00\ud83d"`, false},
	} {
		if got := PortableID(json.RawMessage(tt.id)); got != tt.want {
			t.Errorf("PortableID(%s) = %v, want %v", tt.id, got, tt.want)
		}
	}
}
