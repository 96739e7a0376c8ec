package jsonrpc

import (
	"strings"
	"testing"
)

// TestDecodeSaysWhatIsWrong: a message that is not JSON is refused with
// what is wrong with it, and one that starts with a byte order mark,
// which cannot be seen where it is printed, says so.
func TestDecodeSaysWhatIsWrong(t *testing.T) {
	tests := []struct{ frame, want string }{
		{"\xef\xbb\xbf" + `{"jsonrpc":"2.0","id":1,"method":"ping"}`, "byte order mark"},
		{"\xef\xbb\xbf" + `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, "byte order mark"},
		{" \xef\xbb\xbf" + `{"jsonrpc":"2.0","id":1,"method":"ping"}`, "byte order mark"},
		{"\x00", `invalid character '\x00'`},
		{`hello`, "invalid character 'h'"},
		{`[{"id":1},]`, "invalid character ']'"},
		{`{"id":1} x`, "invalid character 'x'"},
	}
	for _, tt := range tests {
		_, err := Decode([]byte(tt.frame))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Decode(%q) = %v; want an error saying %q", tt.frame, err, tt.want)
		}
	}
}
