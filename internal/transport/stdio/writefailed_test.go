package stdio

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
)

// TestWriteFailed: a write to a pipe whose reader closed it fails, and
// the Conn then says so (WriteFailed, WriteErr), also for a held write.
func TestWriteFailed(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprint("held ", held), func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			c := NewConn(nil, w, 0)
			if err := c.WriteFrame([]byte(`{}`)); err != nil || c.WriteErr() != nil {
				t.Fatalf("a write read by nobody yet: %v, WriteErr %v", err, c.WriteErr())
			}
			select {
			case <-c.WriteFailed():
				t.Fatal("WriteFailed closed after a write that succeeded")
			default:
			}
			r.Close()
			if held {
				c.Hold()
				c.WriteFrame([]byte(`{}`))
				err = c.Flush()
			} else {
				err = c.WriteFrame([]byte(`{}`))
			}
			if !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("a write to a pipe closed by its reader: %v; want EPIPE", err)
			}
			<-c.WriteFailed()
			if !errors.Is(c.WriteErr(), syscall.EPIPE) {
				t.Errorf("WriteErr = %v; want EPIPE", c.WriteErr())
			}
		})
	}
}
