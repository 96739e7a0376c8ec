package journal

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkVerify times Verify per line: b.N lines, taken from a journal
// of 10,000 lines, whole or its first lines for the last of b.N.
func BenchmarkVerify(b *testing.B) {
	const lines = 10_000
	w, err := Open(b.TempDir() + "/j")
	if err != nil {
		b.Fatal(err)
	}
	for i := range lines {
		if err := w.Record(entry(i)); err != nil {
			b.Fatal(err)
		}
	}
	w.Close()
	data, err := os.ReadFile(w.path)
	if err != nil {
		b.Fatal(err)
	}
	// ends[k-1] is where the first k lines end. Verifying whole files
	// only would time up to a file more than b.N lines, which skews a
	// run of few lines.
	ends := make([]int, 0, lines)
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	b.SetBytes(int64(len(data)) / lines)
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := min(b.N-done, lines)
		if n, err := Verify(bytes.NewReader(data[:ends[k-1]])); n != k || err != nil {
			b.Fatal(n, err)
		}
		done += k
	}
}
