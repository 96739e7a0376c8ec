package stdio

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestChildExitCause: a server that exits at start says why on stderr;
// ExitCause gives its exit status and those words, bounded and valid
// UTF-8, and never its arguments, which may hold a credential. Its stderr
// still reaches the proxy's.
func TestChildExitCause(t *testing.T) {
	long := strings.Repeat("é", TailSize) // cut inside a rune by the bound
	tests := []struct {
		name   string
		script string
		want   []string
		not    []string
	}{
		{"status and last lines", `echo starting >&2; echo "boom: no config" >&2; exit 3`,
			[]string{"exited with status 3; its stderr ended: starting | boom: no config"}, nil},
		{"no stderr", `exit 0`, []string{"exited with status 0"}, []string{"stderr"}},
		{"signal", `echo dying >&2; kill -9 $$`, []string{"was ended by a signal (killed); its stderr ended: dying"}, nil},
		{"bounded", `echo old-line >&2; printf '` + long + `\nlast\n' >&2; exit 1`,
			[]string{"exited with status 1; its stderr ended: last"}, []string{"old-line", "é"}},
		{"one long line", `printf '` + long + `z' >&2; exit 1`, []string{"its stderr ended: ...éé", "éz"}, nil},
		{"control characters", `printf 'a\033[31mred\r\n\n' >&2; exit 1`, []string{"its stderr ended: a[31mred"}, nil},
		// $0 and $1 are --api-key and s3cret, the 3rd and 4th arguments of sh.
		{"arguments echoed", `echo "usage: $0 $1 --key=$1" >&2; exit 2`,
			[]string{"its stderr ended: usage: [argument 3] [argument 4] --key=[argument 4]"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, stderr := startChild(t, "sh", "-c", tt.script, "--api-key", "s3cret")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := c.ExitCause(ctx)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("ExitCause() = %q, want it to hold %q", got, w)
				}
			}
			for _, n := range append(tt.not, "s3cret", "api-key") {
				if strings.Contains(got, n) {
					t.Errorf("ExitCause() = %q holds %q", got, n)
				}
			}
			if !utf8.ValidString(got) || len(got) > TailSize+100 {
				t.Errorf("ExitCause() = %q: not valid UTF-8, or %d bytes", got, len(got))
			}
			if strings.Contains(tt.script, ">&2") && stderr.String() == "" {
				t.Errorf("the child's stderr did not reach the proxy's")
			}
		})
	}
}

// TestChildExitCauseWhileRunning: a child that closed its stdout but runs
// on has no cause to tell yet; ExitCause gives up when ctx does.
func TestChildExitCauseWhileRunning(t *testing.T) {
	c, _ := startChild(t, "sh", "-c", "exec >&-; exec sleep 60")
	if _, err := c.ReadFrame(); err == nil {
		t.Fatal("ReadFrame read a frame from a child that closed its stdout")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if got := c.ExitCause(ctx); got != "" {
		t.Errorf("ExitCause() = %q for a running child, want \"\"", got)
	}
}
