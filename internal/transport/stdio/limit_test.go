package stdio

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// TestReadFrameTooLargeBeforeEnd checks that a frame over the limit is
// reported once the limit is passed, not when its newline comes: a peer
// that stalls in the middle of a huge answer must not hold up the answer
// owed for it. The rest of the line is dropped, and the frame after it read.
func TestReadFrameTooLargeBeforeEnd(t *testing.T) {
	const limit = 100 << 10
	pr, pw := io.Pipe()
	defer pw.Close()
	c := NewConn(pr, io.Discard, limit)
	go pw.Write([]byte(`{"id":7,"result":"` + strings.Repeat("x", 3*limit)))
	done := make(chan error, 1)
	go func() { _, err := c.ReadFrame(); done <- err }()
	select {
	case err := <-done:
		var big *FrameTooLargeError
		if !errors.As(err, &big) || !strings.HasPrefix(string(big.Head), `{"id":7,`) {
			t.Fatalf("ReadFrame: %v, want a FrameTooLargeError with the frame's head", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFrame waited for the end of a line already over the limit")
	}
	if c.FrameWaiting() {
		t.Error("FrameWaiting reports the rest of the dropped line as a frame")
	}
	go pw.Write([]byte(strings.Repeat("y", limit) + "\"}\n{\"next\":1}\n"))
	frame, err := c.ReadFrame()
	if err != nil || string(frame) != `{"next":1}` {
		t.Errorf("after the dropped line: %q, %v; want the next frame", frame, err)
	}
}

// TestReadFrameTooLargeLateID checks that a frame over the limit is
// reported a second time once its end has come, with the ids its first
// bytes did not answer for (JSON objects are unordered), and whether it
// is a request or an answer: else the request it answers, or the upstream
// that sent it, would wait for ever. A head that names "method", or
// "result" or "error", tells which it is, and the second report gives
// only the ids after it; one that names none of them gives every id, the
// kind the whole frame's. Frames whose head held all there was to tell,
// notifications, and frames that are not one object get no second report.
func TestReadFrameTooLargeLateID(t *testing.T) {
	const limit = 2048
	// Frames shorter than the read buffer are reported whole; longer ones
	// before their end, the rest read past.
	for _, size := range []int{3 * limit, 200 << 10} {
		big := strings.Repeat("x", size)
		cases := []struct {
			name, frame, want string
		}{
			{"id after the result", `{"jsonrpc":"2.0","result":{"text":"` + big + `"},"id":"mcp-idempotent:a:3"}`, `{"id":"mcp-idempotent:a:3","result":null}`},
			{"number id, spaces", `{"result":"` + big + `" , "id" : 17 }`, `{"id":17,"result":null}`},
			{"id given twice", `{"result":"` + big + `","id":"mcp-idempotent:a:3","id":"zz"}`, `{"id":"mcp-idempotent:a:3","id":"zz","result":null}`},
			{"escaped name", `{"result":"` + big + `","\u0069d":4}`, `{"id":4,"result":null}`},
			{"quotes and brackets in strings", `{"result":"\"}]` + big + `","x":{"id":1},"id":5}`, `{"id":5,"result":null}`},
			{"an error", `{"error":{"code":1,"message":"` + big + `"},"id":6}`, `{"id":6,"result":null}`},
			{"id in the head", `{"id":6,"result":"` + big + `"}`, ""},
			{"a request, id after its method", `{"method":"roots/list","params":"` + big + `","id":7}`, `{"id":7,"method":null}`},
			{"a request, id after its head", `{"params":"` + big + `","id":7,"method":"x"}`, `{"id":7,"method":null}`},
			{"a request, method after its head", `{"id":7,"params":"` + big + `","method":"x"}`, `{"id":7,"method":null}`},
			{"an answer, result after its head", `{"id":7,"_meta":"` + big + `","result":{}}`, `{"id":7,"result":null}`},
			{"a request whose head holds all", `{"id":7,"method":"x","params":"` + big + `"}`, ""},
			{"a notification", `{"method":"x","params":"` + big + `"}`, ""},
			{"a notification, method after its head", `{"params":"` + big + `","method":"x"}`, ""},
			{"a batch", `[{"result":"` + big + `","id":8}]`, ""},
			{"broken", `{"result":"` + big + `"]],"id":9}`, ""},
			{"brackets that do not match", `{"result":["` + big + `"},"id":10]}`, ""},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprint(tc.name, size), func(t *testing.T) {
				c := NewConn(strings.NewReader(tc.frame+"\r\n"+`{"next":1}`+"\n"), io.Discard, limit)
				c.FollowLateIDs()
				var big *FrameTooLargeError
				if _, err := c.ReadFrame(); !errors.As(err, &big) || big.Late {
					t.Fatalf("first read: %v; want a FrameTooLargeError", err)
				}
				frame, err := c.ReadFrame()
				if tc.want != "" {
					if !errors.As(err, &big) || !big.Late || string(big.Head) != tc.want {
						t.Fatalf("second read: %q, %v; want a late report %s", frame, err, tc.want)
					}
					frame, err = c.ReadFrame()
				}
				if err != nil || string(frame) != `{"next":1}` {
					t.Errorf("after the dropped frame: %q, %v; want the next frame", frame, err)
				}
			})
		}
	}
}
