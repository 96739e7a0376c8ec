package main

import (
	"fmt"
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
	calls, err := readCalls(strings.NewReader(trace), roles{middle: "relayer"})
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
	if _, err := readCalls(strings.NewReader("  other 1 [000]  1.0:  syscalls:sys_enter_read: fd: 0x3, buf: 0x0, count: 0x1\n"), roles{middle: "relayer"}); err == nil {
		t.Error("a trace with no calls of the command gave no error")
	}
}

// machineTrace returns a trace of the whole machine: calls through
// "relayer", one for each entry of cpus (the processors of the client's
// write, of the relayer's steps and of the server's write; a server's
// write on processor -1 is one the trace lost), the first at 1000 us and
// each 200 us after the one before, the server 10 us slower each time.
// The client reads its answers, and the server its requests, under the
// numbers the relayer reads them under: only the relayer's reads count.
func machineTrace(cpus [][3]int) string {
	var b strings.Builder
	line := func(comm string, tid, cpu, us int, event string) {
		fmt.Fprintf(&b, "  %s %d [%03d]  %.6f:  syscalls:%s\n", comm, tid, cpu, 100+float64(us)/1e6, event)
	}
	for i, c := range cpus {
		client, cpu, server, t := c[0], c[1], c[2], 1000+200*i
		line("client", 20, client, t-10, "sys_enter_write: fd: 0x00000005, buf: 0x1, count: 0x8b")
		line("relayer", 11, cpu, t, "sys_enter_read: fd: 0x00000006, buf: 0x1000, count: 0x00010000")
		line("relayer", 11, cpu, t+10, "sys_exit_read: 0x8b")
		line("relayer", 11, cpu, t+19, "sys_enter_write: fd: 0x0000000e, buf: 0x2000, count: 0x000000ee")
		line("server", 30, max(server, 0), t+25, "sys_enter_read: fd: 0x0000000f, buf: 0x3000, count: 0x00010000")
		line("server", 30, max(server, 0), t+26, "sys_exit_read: 0xee")
		if server >= 0 {
			line("server", 30, server, t+40+10*i, "sys_enter_write: fd: 0x00000001, buf: 0x3000, count: 0x0000009c")
		}
		line("relayer", 12, cpu, t+90+10*i, "sys_enter_read: fd: 0x0000000f, buf: 0x4000, count: 0x00010000")
		line("relayer", 12, cpu, t+100+10*i, "sys_exit_read: 0x9c")
		line("relayer", 12, cpu, t+105+10*i, "sys_enter_write: fd: 0x00000009, buf: 0x5000, count: 0x00000082")
		line("client", 21, client, t+160, "sys_enter_read: fd: 0x00000006, buf: 0x1, count: 0x10000")
		line("client", 21, client, t+161, "sys_exit_read: 0x82")
	}
	return b.String()
}

func TestLayouts(t *testing.T) {
	// On one processor; with the server; with the client; the server's
	// write lost, which the one before it must not stand for; and the
	// last call, which has no next request, apart.
	trace := machineTrace([][3]int{{0, 0, 0}, {0, 1, 1}, {1, 1, 0}, {1, 1, -1}, {1, 0, 1}})
	calls, err := readCalls(strings.NewReader(trace), roles{middle: "relayer", client: "client", server: "server"})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 5 {
		t.Fatalf("got %d calls, want 5: %+v", len(calls), calls)
	}
	var out strings.Builder
	reportLayouts(&out, calls)
	words := strings.Join(strings.Fields(out.String()), " ")
	for _, line := range []string{
		"one processor 1 25% 9.0 81.0 5.0 105.0 200.0",
		"with the server 1 25% 9.0 91.0 5.0 95.0 200.0",
		"with the client 1 25% 9.0 101.0 5.0 85.0 200.0",
		"not traced 1 25% 9.0 111.0 5.0 75.0 200.0",
	} {
		if !strings.Contains(words, line) {
			t.Errorf("the report lacks %q:\n%s", line, out.String())
		}
	}
	if strings.Contains(out.String(), "apart") {
		t.Errorf("the report has a layout no call had:\n%s", out.String())
	}
	if got := layout(call{cpu: -1, clientCPU: 0, serverCPU: 0}); got != "not traced" {
		t.Errorf("a call whose own processor is unknown: got %q, want not traced", got)
	}

	// Without the client and server named, the calls are the same, and
	// where they ran is not known.
	alone, err := readCalls(strings.NewReader(trace), roles{middle: "relayer"})
	if err != nil {
		t.Fatal(err)
	}
	if len(alone) != 5 || layout(alone[0]) != "not traced" || alone[1].request != calls[1].request {
		t.Errorf("without -client and -server: got %+v", alone)
	}
}
