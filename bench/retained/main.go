// Command retained fills a memory store with the records of new tools/call
// requests, as the proxy makes them, and prints what the process holds
// for them: the live heap per record and the resident set, current and
// peak. Run it under /usr/bin/time -v for the peak from outside as well.
//
// Usage:
//
//	retained [-n 1000000] [-result 200]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "retained:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("n", 1_000_000, "records to store")
	size := flag.Int("result", 200, "bytes of each result")
	flag.Parse()
	base := liveHeap()
	s := memstore.New(memstore.Options{})
	w := recordtest.NewWorkload()
	w.ResultSize = *size
	ctx := context.Background()
	for range *n {
		if _, err := w.Execute(ctx, s); err != nil {
			return err
		}
	}
	heap := liveHeap() - base
	fmt.Printf("records            %d (results of %d bytes)\n", s.Len(), *size)
	fmt.Printf("live heap/record   %.0f B\n", float64(heap)/float64(*n))
	for _, field := range []string{"VmRSS", "VmHWM"} {
		v, err := status(field)
		if err != nil {
			return err
		}
		fmt.Printf("%-18s %s\n", field, v)
	}
	runtime.KeepAlive(s)
	return nil
}

// liveHeap returns the bytes of live heap objects after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// status returns a field of /proc/self/status, such as "VmHWM".
func status(field string) (string, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no %s in /proc/self/status", field)
}
