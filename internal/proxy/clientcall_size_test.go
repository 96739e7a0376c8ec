package proxy

import (
	"reflect"
	"testing"
)

// TestClientCallSize keeps a call's one allocation within the 512-byte
// size class: the runtime puts an 8-byte header before an object over
// 512 bytes that holds pointers, so a clientCall of 513 bytes takes the
// 576-byte class, 64 bytes more for every tools/call.
func TestClientCallSize(t *testing.T) {
	if n := reflect.TypeFor[clientCall]().Size(); n > 512 {
		t.Errorf("clientCall is %d bytes, over 512: a new field needs room found for it", n)
	}
}
