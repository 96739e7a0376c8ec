// Command segments prints where a relaying process spends a sequential
// call's time, from its system calls as perf's tracepoints record them:
//
//	perf record -e syscalls:sys_enter_read,syscalls:sys_exit_read,syscalls:sys_enter_write -o F COMMAND
//	perf script --ns -i F | segments -comm COMMAND
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
//
// Given the client's and the server's commands too (-client, -server), from
// a trace of the whole machine (perf record -a), it prints the calls by
// where the processes ran: the processor the process read the request
// on, against the one the client wrote it on (its last write since the
// answer before) and the one the server wrote its answer on (its last
// write since the request went upstream). Each of a call's four hops
// wakes a process; one on the processor that is running already costs
// less than one that wakes an idle processor, and on a virtual machine
// much less: a chain's median follows the share of each.
//
// bench/segments.sh runs it on the relay and the proxy, one after the
// other.
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
	client := flag.String("client", "", "the client's command, to tell where the processes ran (a trace of the whole machine)")
	server := flag.String("server", "", "the server's command, as -client")
	flag.Parse()
	if *comm == "" {
		fmt.Fprintln(os.Stderr, "segments: -comm is required")
		os.Exit(2)
	}
	if (*client == "") != (*server == "") {
		fmt.Fprintln(os.Stderr, "segments: -client and -server go together")
		os.Exit(2)
	}
	calls, err := readCalls(os.Stdin, roles{middle: *comm, client: *client, server: *server})
	if err != nil {
		fmt.Fprintln(os.Stderr, "segments:", err)
		os.Exit(1)
	}
	report(os.Stdout, calls)
	if *client != "" {
		reportLayouts(os.Stdout, calls)
	}
}

// roles names the commands of a chain as perf names them: the relaying
// process, and optionally its client and server.
type roles struct{ middle, client, server string }

// A role is whose system call an event is.
type role int

const (
	middle role = iota
	client
	server
)

// An event is a read that returned data, or a write about to start.
type event struct {
	at    time.Duration // perf's timestamp
	write bool
	fd    int
	cpu   int // the processor it ran on
	who   role
}

// A call holds the times of its four system calls (see package doc), and
// the processors: the process's at the request's read, the client's at
// its last write between the answer before and that read, the server's
// at its last write between the request's write upstream and the
// answer's read; -1 where no such write was traced.
type call struct {
	request, sent, answer, replied time.Duration
	cpu, clientCPU, serverCPU      int
}

// readCalls reads perf script's lines of the chain's system calls and
// returns the calls through its middle process, in order.
func readCalls(r io.Reader, chain roles) ([]call, error) {
	events, err := readEvents(r, chain)
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
	// The client's and the server's last writes: one counts for a call
	// only if it came since the step before (cpuSince), so that a write
	// the trace lost is not taken for an older one.
	last := map[role]event{}
	cpuSince := func(r role, since time.Duration) int {
		if w, ok := last[r]; ok && w.at >= since {
			return w.cpu
		}
		return -1
	}
	for _, e := range events {
		switch {
		case e.who != middle:
			last[e.who] = e
		case !e.write && e.fd == cin:
			if step == 4 {
				calls = append(calls, c)
			}
			c, step = call{request: e.at, cpu: e.cpu, clientCPU: cpuSince(client, c.replied), serverCPU: -1}, 1
		case step == 1 && e.write && e.fd == uout:
			c.sent, step = e.at, 2
		case step == 2 && !e.write && e.fd == uin:
			c.answer, c.serverCPU, step = e.at, cpuSince(server, c.sent), 3
		case step == 3 && e.write && e.fd == cout:
			c.replied, step = e.at, 4
		}
	}
	if step == 4 {
		calls = append(calls, c)
	}
	return calls, nil
}

// readEvents parses perf script's lines of the chain's read and write
// tracepoints: the middle process's reads that returned data and its
// writes, and the writes of its client and server. A read's descriptor
// is its thread's last sys_enter's.
func readEvents(r io.Reader, chain roles) ([]event, error) {
	who := map[string]role{chain.middle: middle}
	if chain.client != "" {
		who[chain.client], who[chain.server] = client, server
	}
	entered := map[string]int{} // thread: the descriptor of its last system call
	var events []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// comm tid [cpu] seconds: syscalls:name: args...
		if len(f) < 6 || !strings.HasPrefix(f[4], "syscalls:") {
			continue
		}
		role, ok := who[f[0]]
		if !ok {
			continue
		}
		secs, err := strconv.ParseFloat(strings.TrimSuffix(f[3], ":"), 64)
		if err != nil {
			return nil, fmt.Errorf("reading the time of %q: %w", sc.Text(), err)
		}
		cpu, err := strconv.Atoi(strings.Trim(f[2], "[]"))
		if err != nil {
			return nil, fmt.Errorf("reading the processor of %q: %w", sc.Text(), err)
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
			entered[f[0]+" "+tid] = int(fd)
			if name == "syscalls:sys_enter_write" {
				events = append(events, event{at: at, write: true, fd: int(fd), cpu: cpu, who: role})
			}
		case "syscalls:sys_exit_read":
			if role != middle {
				continue
			}
			n, err := strconv.ParseUint(f[5], 0, 64)
			fd, ok := entered[f[0]+" "+tid]
			// An error is a negative number, which perf prints as a
			// large unsigned one.
			if err == nil && ok && n > 0 && n < 1<<62 {
				events = append(events, event{at: at, fd: fd, cpu: cpu})
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
		if e.write != write || e.who != middle {
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

// layout names where a call's processes ran: whether the process read
// the request on the processor the client wrote it on, and whether the
// server wrote its answer on that processor too.
func layout(c call) string {
	switch withClient, withServer := c.cpu == c.clientCPU, c.cpu == c.serverCPU; {
	case c.cpu < 0 || c.clientCPU < 0 || c.serverCPU < 0:
		return "not traced"
	case withClient && withServer:
		return "one processor"
	case withClient:
		return "with the client"
	case withServer:
		return "with the server"
	}
	return "apart"
}

// reportLayouts writes, by layout, the calls' count and share and the
// medians of their segments.
func reportLayouts(w io.Writer, calls []call) {
	type group struct{ in, upstream, out, client, cycle []time.Duration }
	groups := map[string]*group{}
	for i := range len(calls) - 1 { // the last has no next request
		c, next, where := calls[i], calls[i+1].request, layout(calls[i])
		g := groups[where]
		if g == nil {
			g = &group{}
			groups[where] = g
		}
		g.in = append(g.in, c.sent-c.request)
		g.upstream = append(g.upstream, c.answer-c.sent)
		g.out = append(g.out, c.replied-c.answer)
		g.client = append(g.client, next-c.replied)
		g.cycle = append(g.cycle, next-c.request)
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Microsecond)
	}
	fmt.Fprintf(w, "medians by where it ran (us)\n%-16s %6s %6s %6s %9s %6s %7s %7s\n",
		"where", "calls", "share", "in", "upstream", "out", "client", "cycle")
	for _, name := range []string{"one processor", "with the client", "with the server", "apart", "not traced"} {
		g := groups[name]
		if g == nil {
			continue
		}
		fmt.Fprintf(w, "%-16s %6d %5.0f%% %6.1f %9.1f %6.1f %7.1f %7.1f\n", name, len(g.cycle),
			100*float64(len(g.cycle))/float64(len(calls)-1),
			median(g.in), median(g.upstream), median(g.out), median(g.client), median(g.cycle))
	}
}
