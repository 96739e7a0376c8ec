package pgstore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Stores on one new schema, used for the first time at once, all create or
// find it, and agree on one secret.
func TestConcurrentFirstUse(t *testing.T) {
	u, schema := serverURL(t), newSchema(t)
	const n = 8
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = open(t, u, schema, nil)
	}
	secrets := make([][]byte, n)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			var err error
			if secrets[i], err = s.Secret(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i, secret := range secrets {
		if len(secret) != 32 || !bytes.Equal(secret, secrets[0]) {
			t.Fatalf("store %d has secret %x; store 0 has %x: want one 32-byte secret", i, secret, secrets[0])
		}
	}
	again, err := open(t, u, schema, nil).Secret(context.Background())
	if err != nil || !bytes.Equal(again, secrets[0]) {
		t.Fatalf("a later store reads secret %x (%v); want %x", again, err, secrets[0])
	}
}

// The reservation holds across processes: helper processes each reserve
// one key concurrently, and exactly one reservation wins in all.
func TestMultiProcessReserve(t *testing.T) {
	schema := newSchema(t)
	const procs, perProc = 4, 50
	var wg sync.WaitGroup
	outs := make([][]byte, procs)
	for i := range procs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), "MCPI_PGSTORE_HELPER_SCHEMA="+schema, fmt.Sprint("MCPI_PGSTORE_HELPER_N=", perProc))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("helper process %d: %v\n%s", i, err, out)
			}
			outs[i] = out
		})
	}
	wg.Wait()
	wins, ids, results := 0, map[string]bool{}, 0
	for _, out := range outs {
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			var won bool
			var id string
			if _, err := fmt.Sscanf(sc.Text(), "reserved %t %s", &won, &id); err != nil {
				continue
			}
			results++
			ids[id] = true
			if won {
				wins++
			}
		}
	}
	if results != procs*perProc {
		t.Fatalf("%d reservations reported; want %d", results, procs*perProc)
	}
	if wins != 1 || len(ids) != 1 {
		t.Fatalf("%d of %d reservations in %d processes won, sharing %d executions; want 1 winner and 1 execution", wins, results, procs, len(ids))
	}
}

// TestHelperProcess is a process of TestMultiProcessReserve.
func TestHelperProcess(t *testing.T) {
	schema := os.Getenv("MCPI_PGSTORE_HELPER_SCHEMA")
	if schema == "" {
		t.Skip("a helper process of TestMultiProcessReserve")
	}
	var n int
	fmt.Sscan(os.Getenv("MCPI_PGSTORE_HELPER_N"), &n)
	s := open(t, serverURL(t), schema, nil)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			r, won, err := s.Reserve(context.Background(), newRecord("multi-process", time.Now()), record.ReserveOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			fmt.Printf("reserved %t %s\n", won, r.ID)
		})
	}
	wg.Wait()
}
