package jsonrpc

import "testing"

func TestHasLineBreak(t *testing.T) {
	for frame, want := range map[string]bool{
		`{"a":1}`:        false,
		`{"a":"x\ny"}`:   false, // escaped, in a string
		"{\"a\":\n1}":    true,
		"{\"a\":\r\n1}":  true,
		"{\"a\":\r1}":    true,
		"":               false,
		"{\"a\":1}\n":    true,
		"\r" + `{"a":1}`: true,
	} {
		if got := HasLineBreak([]byte(frame)); got != want {
			t.Errorf("HasLineBreak(%q) = %v; want %v", frame, got, want)
		}
	}
}
