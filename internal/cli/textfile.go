package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
)

// utf8BOM is the UTF-8 byte order mark, U+FEFF, that Notepad and Windows
// PowerShell's Set-Content -Encoding utf8 write at the start of a file.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// maxTextFile is the size of the largest key, token or checkpoint file
// readText reads: thousands of lines.
const maxTextFile = 1 << 20

// readText reads a text file a flag names: a key, a token or a checkpoint
// file. A leading UTF-8 byte order mark is taken out: it marks the
// encoding, and is no part of any key, token or note, none of which can
// start with one. Left in, it would make the first word another, so that
// a first "# comment" line became a token. A file in UTF-16 (Windows
// PowerShell's > writes it) is refused, naming the mark.
//
// It returns when ctx ends even if the read does not, as policy.Load
// does: a FIFO with no writer, or a terminal, blocks it for good, and a
// signal must still stop the process. The read is then left to end with
// the process.
func readText(ctx context.Context, path string) ([]byte, error) {
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1)
	go func() {
		b, err := readTextNow(path)
		done <- read{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("reading %s: stopped: %w", path, context.Cause(ctx))
	}
}

// readTextNow is readText, waiting as long as the read does.
func readTextNow(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Bounded: a journal given for a key by mistake, or a device such
	// as /dev/zero, would otherwise be read whole into memory.
	b, err := io.ReadAll(io.LimitReader(f, maxTextFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTextFile {
		return nil, fmt.Errorf("%s is larger than 1MiB, which no key, token or checkpoint file is: is it the file meant?", path)
	}
	if bytes.HasPrefix(b, []byte{0xFF, 0xFE}) || bytes.HasPrefix(b, []byte{0xFE, 0xFF}) {
		return nil, fmt.Errorf("%s starts with a UTF-16 byte order mark: save it as UTF-8", path)
	}
	return bytes.TrimPrefix(b, utf8BOM), nil
}

// errEmptyFile is the usage error of cmd given an empty FILE, as
// `policy check "$POLICY"` gives with POLICY not set: opened, it would
// fail as "open : no such file or directory", which names neither the
// argument nor the variable.
func errEmptyFile(cmd string) error {
	return usagef("%s: a FILE is empty, as an unset shell variable gives: give the file", cmd)
}
