package streamhttp

import (
	"bufio"
	"bytes"
	"io"
	"strconv"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// An event is one server-sent event (WHATWG HTML, "Server-sent events",
// section 9.2.6 "Interpreting an event stream").
type event struct {
	Type string // "message" when the stream named none
	Data []byte
	// ID is the stream's last event id once this event was read: an event
	// without an id field keeps the one before it, as the spec says.
	ID string
	// Retry is the reconnection delay the server asked for, in milliseconds,
	// or -1 if it sent none in this event.
	Retry int
	// TooLarge marks an event whose data was over the limit: Data holds
	// only its first headSize bytes, from which a reader can tell what
	// the message was, and its id. Late then stands for the ids the rest
	// of the data gave that those bytes left unanswered for
	// (jsonrpc.LateHead), or is nil.
	TooLarge bool
	Late     []byte
}

// headSize bounds the head kept of an event's data over the limit: enough
// for the members a JSON-RPC encoder writes before a large result, as the
// stdio transport keeps of a frame.
const headSize = 1024

// An sseReader reads events from a text/event-stream body.
type sseReader struct {
	r      *bufio.Reader
	max    int    // longest data, in bytes: the limit on a message
	lastID string // the last event id seen on this stream
	retry  int    // the last reconnection delay asked for, in ms; -1 if none
	start  bool   // the first line has been read (a BOM may lead it)
	// cut: the line just read was a data line over the limit, and only
	// its first bytes were returned; the rest is for skipLine to drop.
	cut bool
	// tail follows the data of an event over the limit, for the ids
	// after its head; nil until the event's data passes the limit.
	tail *jsonrpc.TailScan
	// headCut: the head kept of such data ends where a line was cut.
	headCut bool
	// afterCR: the last line ended with a CR, which an LF may follow as
	// part of the same terminator. Noted rather than peeked at: a stream
	// whose lines end with a lone CR may send nothing more until the
	// event it ends is answered.
	afterCR bool
}

func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{r: bufio.NewReader(r), max: max, retry: -1}
}

// dataField leads a data line. The limit is on the message a line's
// value carries, as on a JSON body, so a line may be this much longer.
const dataField = "data: "

// line returns the next line without its terminator, which is CRLF, LF or a
// lone CR, and whether it had one. At the end of input it returns io.EOF,
// after returning a last unterminated line, if any. A line over the
// limit, and the field name before it, is returned cut to its first
// bytes, with s.cut set, for skipLine to drop the rest: the stream, and
// the answers after it, go on.
func (s *sseReader) line() ([]byte, bool, error) {
	var buf []byte
	s.cut = false
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				return buf, false, nil
			}
			return nil, false, err
		}
		if s.skipLF(b) {
			continue
		}
		switch b {
		case '\n':
			return buf, true, nil
		case '\r':
			s.afterCR = true
			return buf, true, nil
		}
		// Subtracted, not added to s.max: that may be math.MaxInt.
		if len(buf)-len(dataField) >= s.max {
			// b is the rest's first byte, for skipLine: the ids after
			// the head are read from it.
			s.r.UnreadByte()
			s.cut = true
			return buf, true, nil
		}
		buf = append(buf, b)
	}
}

// skipLine drops the rest of a line cut, up to and including its
// terminator, following it with s.tail if it is data.
func (s *sseReader) skipLine(data bool) error {
	s.cut = false
	var buf [512]byte
	rest := buf[:0] // for s.tail, a chunk at a time
	follow := func() {
		if data {
			s.tail.Scan(rest)
		}
		rest = rest[:0]
	}
	defer follow()
	for {
		b, err := s.r.ReadByte()
		if err == nil && s.skipLF(b) {
			continue
		}
		if err == nil && b != '\n' && b != '\r' {
			if len(rest) == cap(rest) {
				follow()
			}
			rest = append(rest, b)
			continue
		}
		switch {
		case err == io.EOF:
			return io.ErrUnexpectedEOF // an event cut off is not dispatched
		case err != nil:
			return err
		case b == '\n':
			return nil
		case b == '\r':
			s.afterCR = true
			return nil
		}
	}
}

// skipLF reports whether b, the byte just read, is the LF of a CRLF
// whose CR ended the last line.
func (s *sseReader) skipLF(b byte) bool {
	after := s.afterCR
	s.afterCR = false
	return after && b == '\n'
}

// next returns the next event that has data. Events with no data are not
// dispatched (the spec's "if the data buffer is an empty string" step), but
// their id still updates lastID.
func (s *sseReader) next() (event, error) {
	var (
		data    []byte
		hasData bool
		large   bool // the data is over the limit: data is its head
		typ     string
		retry   = -1
	)
	s.tail, s.headCut = nil, false
	for {
		line, terminated, err := s.line()
		if err != nil {
			return event{}, err
		}
		if !s.start {
			s.start = true
			line = bytes.TrimPrefix(line, bom)
		}
		if !terminated {
			// An event cut off by the end of the stream is not dispatched.
			return event{}, io.ErrUnexpectedEOF
		}
		if len(line) == 0 {
			if !hasData {
				typ, retry = "", -1
				continue
			}
			if typ == "" {
				typ = "message"
			}
			ev := event{Type: typ, Data: data, ID: s.lastID, Retry: retry, TooLarge: large}
			if large {
				_, kind := jsonrpc.HeadMessage(data)
				ev.Late = jsonrpc.LateHead(s.tail.LateIDs(len(data), kind))
			}
			return ev, nil
		}
		if err := s.field(line, &data, &large, &hasData, &typ, &retry); err != nil {
			return event{}, err
		}
	}
}

// field takes in line, a field of the event next is reading. A line over
// the limit other than data is read to its end and dropped, and its
// event, whose data may answer a request, goes on: a comment or an
// unknown field means nothing; an event type, id or retry cut is not
// known, so the one before it stands (with no type before it, the event
// is a message), and the stream is not resumed past it.
func (s *sseReader) field(line []byte, data *[]byte, large, hasData *bool, typ *string, retry *int) error {
	if line[0] == ':' {
		// A comment, often a keep-alive.
	} else {
		name, value, found := bytes.Cut(line, []byte(":"))
		if found {
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(name) {
		case "event":
			if !s.cut {
				*typ = string(value)
			}
		case "data":
			err := s.data(data, large, *hasData, value)
			*hasData = true
			return err
		case "id":
			if !s.cut && bytes.IndexByte(value, 0) < 0 {
				s.lastID = string(value)
			}
		case "retry":
			if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 && isDigits(value) && !s.cut {
				*retry = n
				s.retry = n
			}
		}
	}
	if s.cut { // the cut line of a field other than data
		return s.skipLine(false)
	}
	return nil
}

// data adds value, the next data line of an event, to its data, after a
// newline if more is true. Data over the limit is read to the event's end
// all the same, so that the stream goes on: only its head is kept, and
// the rest followed by s.tail for the ids after it.
func (s *sseReader) data(data *[]byte, large *bool, more bool, value []byte) error {
	var sep []byte
	if more {
		sep = []byte("\n")
	}
	if !*large && !s.cut && len(*data)+len(sep)+len(value) <= s.max {
		*data = append(append(*data, sep...), value...)
		return nil
	}
	if !*large {
		*large = true
		s.tail = &jsonrpc.TailScan{}
		s.tail.Scan(*data)
		*data = (*data)[:min(len(*data), headSize)]
	}
	s.tail.Scan(sep)
	s.tail.Scan(value)
	if len(*data) < headSize && !s.headCut {
		*data = append(append(*data, sep...), value[:min(len(value), headSize)]...)
		*data = (*data)[:min(len(*data), headSize)]
		// The head ends where a line was cut: it is the data's first
		// bytes, with nothing left out.
		s.headCut = s.cut
	}
	if s.cut {
		return s.skipLine(true)
	}
	return nil
}

// bom is the byte order mark that may lead a stream.
var bom = []byte("\xef\xbb\xbf")

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}
