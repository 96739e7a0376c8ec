package journal

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkVerify times Verify over a journal of 10,000 lines, per line.
func BenchmarkVerify(b *testing.B) {
	w, err := Open(b.TempDir() + "/j")
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10_000 {
		if err := w.Record(entry(i)); err != nil {
			b.Fatal(err)
		}
	}
	w.Close()
	data, err := os.ReadFile(w.path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)) / 10_000)
	b.ResetTimer()
	for i := 0; i < b.N; i += 10_000 {
		if n, err := Verify(bytes.NewReader(data)); n != 10_000 || err != nil {
			b.Fatal(n, err)
		}
	}
}
