package proxy

import (
	"reflect"
	"testing"
)

// TestClientCallSize keeps a call's one allocation within the 768-byte
// size class: the runtime puts an 8-byte header before an object over
// 512 bytes that holds pointers, and a clientCall of more than 760 bytes
// takes the 896-byte class, 128 bytes more for every tools/call.
func TestClientCallSize(t *testing.T) {
	if n := reflect.TypeFor[clientCall]().Size(); n > 760 {
		t.Errorf("clientCall is %d bytes, over 760: a new field needs room found for it", n)
	}
}
