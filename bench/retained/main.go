// Command retained fills a memory store with the records of new tools/call
// requests, as the proxy makes them, and prints what the process holds
// for them: the live heap per record and the resident set, current and
// peak. Run it under /usr/bin/time -v for the peak from outside as well.
//
// With -idle, it then stays idle that long, renewing its leases as a
// proxy does (every third of -lease), and prints how many records are
// left and the live heap they hold: with a -retention shorter than the
// wait, none should be.
//
// Usage:
//
//	retained [-n 1000000] [-result 200] [-retention 24h] [-idle 0 -lease 30s]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

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
	retention := flag.Duration("retention", 24*time.Hour, "retention of each record")
	idle := flag.Duration("idle", 0, "how long to stay idle after filling the store")
	lease := flag.Duration("lease", 30*time.Second, "lease, renewed every third of it while idle")
	flag.Parse()
	if *n <= 0 || *retention <= 0 || *idle < 0 || *lease <= 0 {
		return fmt.Errorf("-n, -retention and -lease must be positive, -idle not negative")
	}
	base := liveHeap()
	s := memstore.New(memstore.Options{})
	w := recordtest.NewWorkload()
	w.ResultSize = *size
	w.Retention = *retention
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
	if *idle > 0 {
		keepLeases(ctx, s, w.Owner, *lease, *idle)
		fmt.Printf("idle               %v, leases renewed every %v\n", *idle, *lease/3)
		fmt.Printf("records left       %d\n", s.Len())
		fmt.Printf("live heap/record   %.0f B, idle\n", float64(liveHeap()-base)/float64(*n))
	}
	runtime.KeepAlive(s)
	return nil
}

// keepLeases renews owner's leases every third of lease for d, as a
// proxy's interceptor does, busy or idle (intercept.KeepLeases): the
// memory store drops the records whose retention ran out at a renewal.
func keepLeases(ctx context.Context, s *memstore.Store, owner string, lease, d time.Duration) {
	t := time.NewTicker(lease / 3)
	defer t.Stop()
	end := time.After(d)
	for {
		select {
		case <-end:
			return
		case <-t.C:
			if err := s.Renew(ctx, owner, time.Now().Add(lease)); err != nil {
				fmt.Fprintln(os.Stderr, "retained: renewing leases:", err)
			}
		}
	}
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
