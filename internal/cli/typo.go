package cli

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// commands are the names Run takes as a command rather than as the
// upstream's: a name near one that is no program was likely meant as it.
var commands = []string{"serve", "activity", "audit", "policy", "demo", "version", "help"}

// suggestCommand adds to err, the upstream command name's failing to
// start, the command name meant, if name is no program and a typo away
// from one: `mcp-idempotent serv --listen ...` would otherwise say only
// that "serv" is not found. A program of that name, found, still runs.
func suggestCommand(err error, name string) error {
	if !errors.Is(err, exec.ErrNotFound) || strings.Contains(name, "/") {
		return err
	}
	lower := strings.ToLower(name)
	for _, c := range commands {
		d := editDistance(lower, c)
		if len(c) <= 4 {
			// demo, help: a letter changed would reach programs such
			// as deno, which is then simply not installed.
			if d == 1 && (len(lower) != len(c) || sameLetters(lower, c)) {
				return &suggested{err: err, cmd: "mcp-idempotent " + c}
			}
			continue
		}
		if d <= 2 {
			return &suggested{err: err, cmd: "mcp-idempotent " + c}
		}
	}
	return err
}

// commandAfterFlags adds to err, the upstream command name's failing to
// start, that name is a command whose flags go after it, if it is one
// and no program: `mcp-idempotent --log-level debug serve ...` would
// otherwise say only that "serve" is not found. The flags are not
// shown: one may hold a credential (a store URL's password).
func commandAfterFlags(err error, name string) error {
	if !errors.Is(err, exec.ErrNotFound) || !slices.Contains(commands, name) {
		return err
	}
	return fmt.Errorf("%w; %s is a command of mcp-idempotent: give its flags after it, as mcp-idempotent %s --flag ...", err, name, name)
}

// sameLetters reports whether a and b hold the same letters, perhaps in
// another order.
func sameLetters(a, b string) bool {
	x, y := []rune(a), []rune(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// suggested is an error followed by the command line likely meant.
type suggested struct {
	err error
	cmd string
}

func (s *suggested) Error() string { return s.err.Error() + `; did you mean "` + s.cmd + `"?` }
func (s *suggested) Unwrap() error { return s.err }

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and swaps of two neighbours.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}
