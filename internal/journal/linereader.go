package journal

import (
	"bufio"
	"errors"
	"io"
)

// A lineReader splits a journal into lines of any length.
type lineReader struct {
	br     *bufio.Reader
	buf    []byte
	offset int64 // bytes read so far, newlines included
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next line without its newline, and whether it is torn
// (the input ended before a newline); io.EOF when there is none. The line
// is valid until the next call.
func (r *lineReader) next() (line []byte, torn bool, err error) {
	r.buf = r.buf[:0]
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
