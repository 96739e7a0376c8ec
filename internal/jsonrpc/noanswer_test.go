package jsonrpc

import "testing"

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
