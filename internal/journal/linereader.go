package journal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
)

// A lineReader splits a journal into lines of any length.
type lineReader struct {
	src    io.Reader
	br     *bufio.Reader
	buf    []byte
	offset int64 // bytes read so far, newlines included
	start  int64 // the offset of the line next returned
	// seeker is src, if it can seek: a line longer than br's buffer is
	// then looked through to its end before it is kept (see long). base
	// is where src stood at the start.
	seeker io.Seeker
	base   int64
}

func newLineReader(r io.Reader) *lineReader {
	lr := &lineReader{src: r, br: bufio.NewReaderSize(r, 64<<10)}
	if s, ok := r.(io.Seeker); ok {
		if at, err := s.Seek(0, io.SeekCurrent); err == nil { // a pipe cannot
			lr.seeker, lr.base = s, at
		}
	}
	return lr
}

// next returns the next line without its newline, and whether it is torn
// (the input ended before a newline); io.EOF when there is none. The line
// is valid until the next call. Of a long torn line, only its first bytes
// are returned: no reader of one needs more.
func (r *lineReader) next() (line []byte, torn bool, err error) {
	r.buf = r.buf[:0]
	r.start = r.offset
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.offset += int64(len(chunk))
		switch {
		case err == nil:
			if len(r.buf) == 0 {
				return chunk[:len(chunk)-1], false, nil
			}
			r.buf = append(r.buf, chunk[:len(chunk)-1]...)
			return r.buf, false, nil
		case errors.Is(err, bufio.ErrBufferFull):
			r.buf = append(r.buf, chunk...)
			if r.seeker != nil {
				return r.long()
			}
		case errors.Is(err, io.EOF):
			r.buf = append(r.buf, chunk...)
			if len(r.buf) == 0 {
				return nil, false, io.EOF
			}
			return r.buf, true, nil
		default:
			return nil, false, err
		}
	}
}

// long reads a line longer than the buffer, whose first bytes r.buf
// holds, by finding its end first and then reading it whole into a
// buffer of its size. A torn line is not kept whole: a file that is no
// journal, or a tail a crash left, without a newline in hundreds of
// megabytes, took several times its size in memory to be called torn.
func (r *lineReader) long() ([]byte, bool, error) {
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.offset += int64(len(chunk))
		switch {
		case err == nil:
			return r.reread()
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return r.buf, true, nil
		default:
			return nil, false, err
		}
	}
}

// reread reads again the line from r.start to r.offset, its newline
// included, and returns it without its newline.
func (r *lineReader) reread() ([]byte, bool, error) {
	if _, err := r.seeker.Seek(r.base+r.start, io.SeekStart); err != nil {
		return nil, false, err
	}
	r.br.Reset(r.src)
	n := int(r.offset - r.start)
	r.buf = slices.Grow(r.buf[:0], n)[:n]
	if _, err := io.ReadFull(r.br, r.buf); err != nil {
		return nil, false, err
	}
	if r.buf[n-1] != '\n' {
		return nil, false, fmt.Errorf("the line at byte %d changed while it was read", r.start)
	}
	return r.buf[:n-1], false, nil
}
