package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// checkCommand reports why the upstream command name cannot start, or
// nil. Besides finding it on the PATH, it reads a script's "#!" line and
// finds the interpreter there (through env, the program env runs): a
// script whose interpreter is missing is found and executable, and
// fails only when started. It cannot see what fails later, such as a
// script file that an interpreter named as the command cannot read.
func checkCommand(name string) error {
	path, err := exec.LookPath(name)
	if err != nil {
		return err
	}
	interp, arg, ok := shebang(path)
	if !ok {
		return nil // a binary, or a file this process cannot read
	}
	// The kernel takes the interpreter as a path, never from the PATH.
	p := interp
	if !strings.Contains(p, "/") {
		p = "./" + p
	}
	if _, err := exec.LookPath(p); err != nil {
		return fmt.Errorf("%s: its interpreter %s cannot be run (from its #! line)", path, interp)
	}
	if filepath.Base(interp) != "env" {
		return nil
	}
	prog := envProgram(arg)
	if prog == "" {
		return nil
	}
	if _, err := exec.LookPath(prog); err != nil {
		return fmt.Errorf("%s: its interpreter %s is not on the PATH (its #! line runs %s %s)", path, prog, interp, arg)
	}
	return nil
}

// shebang returns the interpreter and the argument, if any, of the
// script at path, as the kernel reads its first line: the interpreter,
// then the rest of the line as one argument.
func shebang(path string) (interp, arg string, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadSlice('\n')
	if !bytes.HasPrefix(line, []byte("#!")) || err != nil && len(line) < 3 {
		return "", "", false
	}
	rest := strings.TrimSpace(string(line[2:]))
	interp, arg = rest, ""
	if i := strings.IndexAny(rest, " \t"); i >= 0 {
		// The kernel ends the interpreter at a space or a tab.
		interp, arg = rest[:i], rest[i+1:]
	}
	return interp, strings.TrimSpace(arg), interp != ""
}

// envProgram returns the program that env, given arg as its one
// argument, runs: the first word that is not an option nor a NAME=VALUE,
// or "" when it cannot tell (an option that takes a value).
func envProgram(arg string) string {
	words := strings.Fields(arg)
	for i := 0; i < len(words); i++ {
		switch w := words[i]; {
		case w == "-S" || w == "--split-string" || w == "-i" || w == "--ignore-environment" || w == "-":
			continue
		case strings.HasPrefix(w, "-"):
			return "" // -u NAME, -C DIR...: not worth parsing
		case strings.Contains(w, "="):
			continue
		default:
			return w
		}
	}
	return ""
}
