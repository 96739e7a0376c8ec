package cli

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignal: while serve waits for its calls, a signal other than
// the one that stopped it, or the same one later, is the operator saying
// not to wait; the same one at once is that one again (one Ctrl-C that
// reaches serve from its terminal and from a launcher that forwards it,
// as npx does), and the wait goes on.
func TestSecondSignal(t *testing.T) {
	for _, tt := range []struct {
		first, sig os.Signal
		since      time.Duration
		want       bool
	}{
		{os.Interrupt, os.Interrupt, time.Millisecond, false},
		{os.Interrupt, os.Interrupt, 0, false},
		{os.Interrupt, os.Interrupt, sameKeypress, true},
		{os.Interrupt, os.Interrupt, 2 * time.Second, true},
		{syscall.SIGTERM, os.Interrupt, 0, true},
		{os.Interrupt, syscall.SIGTERM, time.Millisecond, true},
		{nil, os.Interrupt, 0, true}, // stopped otherwise than by a signal
	} {
		if got := secondSignal(tt.first, tt.sig, tt.since); got != tt.want {
			t.Errorf("secondSignal(%v, %v, %v) = %v; want %v", tt.first, tt.sig, tt.since, got, tt.want)
		}
	}
}
