package cli

import (
	"errors"
	"fmt"
	"io"
	"syscall"
)

// An outputWriter keeps the first error a write to w returned, and
// drops the writes after it: a command's output to a full disk
// (activity show > FILE) would otherwise end short, and the command
// exit 0.
type outputWriter struct {
	w   io.Writer
	err error
}

func (o *outputWriter) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err != nil {
		o.err = err
	}
	return n, err
}

// runOutput runs cmd with stdout kept by an outputWriter, and fails it
// if its output could not all be written.
func runOutput(stdout io.Writer, cmd func(stdout io.Writer) error) error {
	o := &outputWriter{w: stdout}
	err := cmd(o)
	// A reader that went away (| head) took all it wanted: no error.
	if err == nil && o.err != nil && !errors.Is(o.err, syscall.EPIPE) {
		return fmt.Errorf("writing the output: %w", o.err)
	}
	return err
}
