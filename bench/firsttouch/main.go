//go:build linux

// Command firsttouch prints what a page fault on fresh anonymous memory
// costs this machine: the time to touch each page of a new mapping, in a
// process that has touched nothing yet, then the same again once those
// pages have been freed and mapped anew.
//
// On a virtual machine the first can cost several times the second. The
// first time the guest touches a physical page after it boots, the host
// backs that page too; a page the guest has used and freed costs only the
// guest's own fault. A new process's heap faults in pages as it grows, so
// on a machine that has just booted the proxy's page faults weigh on
// bench/run.sh more than they do once the machine has run a while
// (docs/benchmarks.md, "A fresh process, and one that has run a while").
//
// Usage:
//
//	firsttouch [-mib 64] [-touch GiB]
//
// -touch first touches that many GiB once, in chunks of 1 GiB, and frees
// them, so that the host backs that much of the guest's memory, as a
// machine that has run a while has it backed. Leave room for the rest of
// the machine: it takes what it touches until it exits.
package main

import (
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"
)

func main() {
	mib := flag.Int("mib", 64, "size of the mapping timed, in MiB")
	touch := flag.Int("touch", 0, "GiB to touch once before timing; 0 for none")
	flag.Parse()
	if *mib < 1 || *touch < 0 {
		fmt.Fprintln(os.Stderr, "firsttouch: -mib must be 1 or more and -touch 0 or more")
		os.Exit(2)
	}
	if err := run(*mib<<20, *touch); err != nil {
		fmt.Fprintln(os.Stderr, "firsttouch:", err)
		os.Exit(1)
	}
}

func run(size, touchGiB int) error {
	if touchGiB > 0 {
		start := time.Now()
		var held [][]byte // kept mapped, so each chunk takes new pages
		for range touchGiB {
			b, err := mapTouched(1 << 30)
			if err != nil {
				return err
			}
			held = append(held, b)
		}
		fmt.Printf("touched %d GiB in %v\n", touchGiB, time.Since(start).Round(time.Millisecond))
		for _, b := range held {
			if err := syscall.Munmap(b); err != nil {
				return err
			}
		}
	}
	for _, what := range []string{"a new mapping", "the same size mapped again"} {
		start := time.Now()
		b, err := mapTouched(size)
		if err != nil {
			return err
		}
		perPage := time.Since(start) / time.Duration(size/pageSize)
		fmt.Printf("%s: %.2f us a page\n", what, float64(perPage)/1e3)
		if err := syscall.Munmap(b); err != nil {
			return err
		}
	}
	return nil
}

const pageSize = 4096

// mapTouched maps size bytes of anonymous memory in small pages and
// writes one byte of each page, so that each takes its fault.
func mapTouched(size int) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes: %w", size, err)
	}
	// Small pages, as a heap growing a span at a time mostly takes.
	if err := syscall.Madvise(b, syscall.MADV_NOHUGEPAGE); err != nil {
		return nil, fmt.Errorf("madvise: %w", err)
	}
	for i := 0; i < len(b); i += pageSize {
		b[i] = 1
	}
	return b, nil
}
