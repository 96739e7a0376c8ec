package journal_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
)

func ExampleVerify() {
	dir, _ := os.MkdirTemp("", "journal")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "journal.jsonl")

	w, err := journal.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	at := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	for _, state := range []string{"accepted", "dispatched", "completed", "delivered"} {
		w.Record(journal.Entry{Time: at, Execution: "exe_1", Tool: "charge_card", State: state})
	}
	w.Close()

	b, _ := os.ReadFile(path)
	n, err := journal.Verify(strings.NewReader(string(b)))
	fmt.Println(n, err)

	// The dispatch, rewritten after the fact as a failure: "nothing was
	// sent".
	tampered := strings.Replace(string(b), `"state":"dispatched"`, `"state":"failed"`, 1)
	n, err = journal.Verify(strings.NewReader(tampered))
	fmt.Println(n, err)
	// Output:
	// 4 <nil>
	// 1 line 2: it is not the line that line 3's prev names, while line 3 is as line 4 names it: line 2 was changed, or lines after it were removed or inserted
}
