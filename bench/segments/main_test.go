package main

import (
	"strings"
	"testing"
	"time"
)

// A trace of two calls through a process that reads the client on fd 6
// and the upstream on fd 15, and writes them on 9 and 14; with a start-up
// read of fd 3, a read that failed (EAGAIN), another command's lines,
// and two threads.
const trace = `
  relayer 10 [001]  100.000000:  syscalls:sys_enter_read: fd: 0x00000003, buf: 0x7ffc, count: 0x00000340
  relayer 10 [001]  100.000002:   syscalls:sys_exit_read: 0x340
  relayer 11 [000]  100.001000:  syscalls:sys_enter_read: fd: 0x00000006, buf: 0x1000, count: 0x00010000
  relayer 11 [000]  100.001010:   syscalls:sys_exit_read: 0x8b
  relayer 11 [000]  100.001019:  syscalls:sys_enter_write: fd: 0x0000000e, buf: 0x2000, count: 0x000000ee
  relayer 11 [000]  100.001030:  syscalls:sys_enter_read: fd: 0x00000006, buf: 0x1000, count: 0x00010000
  relayer 11 [000]  100.001031:   syscalls:sys_exit_read: 0xfffffffffffffff5
  benchserver 12 [001]  100.001040:  syscalls:sys_enter_write: fd: 0x00000001, buf: 0x3000, count: 0x0000009c
  relayer 12 [001]  100.001050:  syscalls:sys_enter_read: fd: 0x0000000f, buf: 0x4000, count: 0x00010000
  relayer 12 [001]  100.001059:   syscalls:sys_exit_read: 0x9c
  relayer 12 [001]  100.001063:  syscalls:sys_enter_write: fd: 0x00000009, buf: 0x5000, count: 0x00000082
  relayer 11 [000]  100.001100:  syscalls:sys_enter_read: fd: 0x00000006, buf: 0x1000, count: 0x00010000
  relayer 11 [000]  100.001130:   syscalls:sys_exit_read: 0x8b
  relayer 11 [000]  100.001140:  syscalls:sys_enter_write: fd: 0x0000000e, buf: 0x2000, count: 0x000000ee
  relayer 12 [001]  100.001190:  syscalls:sys_enter_read: fd: 0x0000000f, buf: 0x4000, count: 0x00010000
  relayer 12 [001]  100.001200:   syscalls:sys_exit_read: 0x9c
  relayer 12 [001]  100.001205:  syscalls:sys_enter_write: fd: 0x00000009, buf: 0x5000, count: 0x00000082
`

func TestReadCalls(t *testing.T) {
	calls, err := readCalls(strings.NewReader(trace), "relayer")
	if err != nil {
		t.Fatal(err)
	}
	at := func(us int) time.Duration { return 100*time.Second + time.Duration(us)*time.Microsecond }
	want := []call{
		{request: at(1010), sent: at(1019), answer: at(1059), replied: at(1063)},
		{request: at(1130), sent: at(1140), answer: at(1200), replied: at(1205)},
	}
	if len(calls) != len(want) {
		t.Fatalf("got %d calls, want %d: %+v", len(calls), len(want), calls)
	}
	for i := range want {
		// perf's seconds pass through a float64: to the microsecond.
		for _, d := range []struct{ got, want time.Duration }{
			{calls[i].request, want[i].request}, {calls[i].sent, want[i].sent},
			{calls[i].answer, want[i].answer}, {calls[i].replied, want[i].replied},
		} {
			if diff := d.got - d.want; diff > time.Microsecond/2 || diff < -time.Microsecond/2 {
				t.Errorf("call %d: got %+v, want %+v", i, calls[i], want[i])
				break
			}
		}
	}
	var out strings.Builder
	report(&out, calls)
	for _, line := range []string{"2 calls", "in               9.0", "client          67.0"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("the report lacks %q:\n%s", line, out.String())
		}
	}
}

func TestNoCalls(t *testing.T) {
	if _, err := readCalls(strings.NewReader("  other 1 [000]  1.0:  syscalls:sys_enter_read: fd: 0x3, buf: 0x0, count: 0x1\n"), "relayer"); err == nil {
		t.Error("a trace with no calls of the command gave no error")
	}
}
