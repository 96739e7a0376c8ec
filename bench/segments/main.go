// Command segments prints where a relaying process spends a sequential
// call's time, from its system calls as perf's tracepoints record them:
//
//	perf record -e syscalls:sys_enter_read,syscalls:sys_exit_read,syscalls:sys_enter_write -o F COMMAND
//	perf script -i F | segments -comm COMMAND
//
// A call through the process is four system calls: a read of the
// client's request, its write to the upstream, a read of the upstream's
// answer, its write to the client. segments prints, over the calls, the
// median, the 90th percentile and the mean of:
//
//   - in: from the request's read returning to its write upstream;
//   - upstream: from that write to the answer's read returning, the
//     upstream's round trip and the process's waking;
//   - out: from the answer's read returning to its write to the client;
//   - client: from that write to the next request's read returning, the
//     client's turnaround and the process's waking;
//   - cycle: one request's read to the next.
//
// In and out are the process's own work on the call's path; the others
// show how fast it wakes. The client's and the upstream's descriptors
// are the two read the most, and the two written the most: the client
// speaks first (initialize), so the first read of the two is the
// client's, and the first write of the two the upstream's.
// bench/segments.sh runs it on the relay and the proxy side by side.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	comm := flag.String("comm", "", "the command whose system calls to read, as perf names it (15 characters at most)")
	flag.Parse()
	if *comm == "" {
		fmt.Fprintln(os.Stderr, "segments: -comm is required")
		os.Exit(2)
	}
	calls, err := readCalls(os.Stdin, *comm)
	if err != nil {
		fmt.Fprintln(os.Stderr, "segments:", err)
		os.Exit(1)
	}
	report(os.Stdout, calls)
}

// An event is a read that returned data, or a write about to start.
type event struct {
	at    time.Duration // perf's timestamp
	write bool
	fd    int
}

// A call holds the times of its four system calls (see package doc).
type call struct{ request, sent, answer, replied time.Duration }

// readCalls reads perf script's lines of comm's system calls and returns
// its calls in order.
func readCalls(r io.Reader, comm string) ([]call, error) {
	events, err := readEvents(r, comm)
	if err != nil {
		return nil, err
	}
	cin, uin := firstOfBusiest(events, false)
	uout, cout := firstOfBusiest(events, true)
	if cin < 0 || uout < 0 {
		return nil, errors.New("fewer than two descriptors read and written: no calls relayed")
	}
	// Each call's steps in order: the next event awaited, and where its
	// time goes.
	var calls []call
	var c call
	step := 0
	for _, e := range events {
		switch {
		case !e.write && e.fd == cin:
			if step == 4 {
				calls = append(calls, c)
			}
			c, step = call{request: e.at}, 1
		case step == 1 && e.write && e.fd == uout:
			c.sent, step = e.at, 2
		case step == 2 && !e.write && e.fd == uin:
			c.answer, step = e.at, 3
		case step == 3 && e.write && e.fd == cout:
			c.replied, step = e.at, 4
		}
	}
	if step == 4 {
		calls = append(calls, c)
	}
	return calls, nil
}

// readEvents parses perf script's lines of comm's read and write
// tracepoints. A read's descriptor is its thread's last sys_enter's.
func readEvents(r io.Reader, comm string) ([]event, error) {
	entered := map[string]int{} // thread: the descriptor of its last system call
	var events []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// comm tid [cpu] seconds: syscalls:name: args...
		if len(f) < 6 || f[0] != comm || !strings.HasPrefix(f[4], "syscalls:") {
			continue
		}
		secs, err := strconv.ParseFloat(strings.TrimSuffix(f[3], ":"), 64)
		if err != nil {
			return nil, fmt.Errorf("reading the time of %q: %w", sc.Text(), err)
		}
		at := time.Duration(secs * float64(time.Second))
		tid, name := f[1], strings.TrimSuffix(f[4], ":")
		switch name {
		case "syscalls:sys_enter_read", "syscalls:sys_enter_write":
			if f[5] != "fd:" || len(f) < 7 {
				return nil, fmt.Errorf("no descriptor in %q", sc.Text())
			}
			fd, err := strconv.ParseInt(strings.TrimSuffix(f[6], ","), 0, 64)
			if err != nil {
				return nil, fmt.Errorf("reading the descriptor of %q: %w", sc.Text(), err)
			}
			entered[tid] = int(fd)
			if name == "syscalls:sys_enter_write" {
				events = append(events, event{at: at, write: true, fd: int(fd)})
			}
		case "syscalls:sys_exit_read":
			n, err := strconv.ParseUint(f[5], 0, 64)
			fd, ok := entered[tid]
			// An error is a negative number, which perf prints as a
			// large unsigned one.
			if err == nil && ok && n > 0 && n < 1<<62 {
				events = append(events, event{at: at, fd: fd})
			}
		}
	}
	return events, sc.Err()
}

// firstOfBusiest returns the two descriptors with the most reads (or
// writes), the one used first first; -1 for each it cannot find.
func firstOfBusiest(events []event, write bool) (first, second int) {
	count := map[int]int{}
	firstAt := map[int]time.Duration{}
	for _, e := range events {
		if e.write != write {
			continue
		}
		if count[e.fd] == 0 {
			firstAt[e.fd] = e.at
		}
		count[e.fd]++
	}
	fds := make([]int, 0, len(count))
	for fd := range count {
		fds = append(fds, fd)
	}
	slices.SortFunc(fds, func(a, b int) int { return count[b] - count[a] })
	if len(fds) < 2 {
		return -1, -1
	}
	a, b := fds[0], fds[1]
	if firstAt[b] < firstAt[a] {
		a, b = b, a
	}
	return a, b
}

// report writes the segments' statistics over calls.
func report(w io.Writer, calls []call) {
	fmt.Fprintf(w, "%d calls\n%-10s %9s %9s %9s\n", len(calls), "segment", "p50 us", "p90 us", "mean us")
	segments := []struct {
		name string
		of   func(i int) time.Duration
	}{
		{"in", func(i int) time.Duration { return calls[i].sent - calls[i].request }},
		{"upstream", func(i int) time.Duration { return calls[i].answer - calls[i].sent }},
		{"out", func(i int) time.Duration { return calls[i].replied - calls[i].answer }},
		{"client", func(i int) time.Duration { return calls[i+1].request - calls[i].replied }},
		{"cycle", func(i int) time.Duration { return calls[i+1].request - calls[i].request }},
	}
	for _, s := range segments {
		var d []time.Duration
		for i := range len(calls) - 1 { // the last has no next request
			d = append(d, s.of(i))
		}
		if len(d) == 0 {
			fmt.Fprintf(w, "%-10s %9s %9s %9s\n", s.name, "-", "-", "-")
			continue
		}
		slices.Sort(d)
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		us := func(x time.Duration) float64 { return float64(x) / float64(time.Microsecond) }
		fmt.Fprintf(w, "%-10s %9.1f %9.1f %9.1f\n", s.name, us(d[len(d)/2]), us(d[len(d)*9/10]), us(sum/time.Duration(len(d))))
	}
}
