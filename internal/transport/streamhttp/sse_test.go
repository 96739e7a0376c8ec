package streamhttp

import (
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func readAll(r *sseReader) ([]event, error) {
	var evs []event
	for {
		ev, err := r.next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []event
		err      error
	}{
		{"one", "data: {}\n\n", []event{{"message", []byte("{}"), "", -1, false, nil}}, io.EOF},
		{"multiline data", "data: a\ndata:b\ndata:  c\n\n", []event{{"message", []byte("a\nb\n c"), "", -1, false, nil}}, io.EOF},
		{"crlf and cr", "event: message\r\nid: 7\rdata: x\r\n\r\n", []event{{"message", []byte("x"), "7", -1, false, nil}}, io.EOF},
		{"type, id, retry", "event: ping\nid: s1_0\nretry: 500\ndata: 1\n\nid: s1_1\ndata: 2\n\n", []event{
			{"ping", []byte("1"), "s1_0", 500, false, nil},
			{"message", []byte("2"), "s1_1", -1, false, nil},
		}, io.EOF},
		{"comments and no data", ": keep-alive\n\nid: 3\n\ndata: y\n\n", []event{{"message", []byte("y"), "3", -1, false, nil}}, io.EOF},
		{"bom", "\xef\xbb\xbfdata: z\n\n", []event{{"message", []byte("z"), "", -1, false, nil}}, io.EOF},
		{"field without colon", "data\n\n", []event{{"message", nil, "", -1, false, nil}}, io.EOF},
		{"bad retry and id with NUL", "retry: 1x\nid: a\x00b\ndata: q\n\n", []event{{"message", []byte("q"), "", -1, false, nil}}, io.EOF},
		{"cut off", "data: {}\n\ndata: {\"par", []event{{"message", []byte("{}"), "", -1, false, nil}}, io.ErrUnexpectedEOF},
		{"cut off before the blank line", "data: {}\n", nil, io.EOF},
		// Data over the limit is read to the end of its event, which
		// comes with its head; the stream goes on.
		{"data too long", "data: " + strings.Repeat("x", 100) + "\r\nid: 4\n\ndata: y\n\n", []event{
			{"message", []byte(strings.Repeat("x", 64)), "4", -1, true, nil},
			{"message", []byte("y"), "4", -1, false, nil},
		}, io.EOF},
		{"data lines too long together", "data: " + strings.Repeat("x", 40) + "\ndata: " + strings.Repeat("y", 40) + "\rdata: z\n\n", []event{
			{"message", []byte(strings.Repeat("x", 40) + "\n" + strings.Repeat("y", 40) + "\nz"), "", -1, true, nil},
		}, io.EOF},
		{"data too long, its id after", "data: {\"result\":\"" + strings.Repeat("x", 100) + "\",\n" + "data: \"id\":5}\n\n", []event{
			{"message", []byte("{\"result\":\"" + strings.Repeat("x", 53)), "", -1, true, []byte(`{"id":5,"result":null}`)},
		}, io.EOF},
		// The byte past the limit, here a quote and a comma, is read
		// for the ids after the head.
		{"data too long, a quote at the limit", "data: {\"result\":\"" + strings.Repeat("x", 53) + "\",\"id\":5}\n\n", []event{
			{"message", []byte("{\"result\":\"" + strings.Repeat("x", 53)), "", -1, true, []byte(`{"id":5,"result":null}`)},
		}, io.EOF},
		{"data too long, a comma at the limit", "data: {\"result\":\"" + strings.Repeat("x", 52) + "\",\"id\":5}\n\n", []event{
			{"message", []byte("{\"result\":\"" + strings.Repeat("x", 52) + "\""), "", -1, true, []byte(`{"id":5,"result":null}`)},
		}, io.EOF},
		{"data too long, cut off", "data: " + strings.Repeat("x", 100), nil, io.ErrUnexpectedEOF},
		// Any other line over the limit is read to its end and dropped,
		// not its event; an id cut is no id: the one before it stands.
		{"id too long", "id: 1\ndata: a\n\nid: " + strings.Repeat("x", 100) + "\r\ndata: y\n\n", []event{
			{"message", []byte("a"), "1", -1, false, nil},
			{"message", []byte("y"), "1", -1, false, nil},
		}, io.EOF},
		{"comment too long", ":" + strings.Repeat("x", 100) + "\rdata: y\n\n", []event{{"message", []byte("y"), "", -1, false, nil}}, io.EOF},
		{"event type too long", "event: " + strings.Repeat("x", 100) + "\ndata: y\n\n", []event{{"message", []byte("y"), "", -1, false, nil}}, io.EOF},
		{"event type too long after one", "event: ping\nevent: " + strings.Repeat("x", 100) + "\ndata: y\n\n", []event{{"ping", []byte("y"), "", -1, false, nil}}, io.EOF},
		{"retry too long", "retry: 5\nretry: " + strings.Repeat("0", 100) + "\ndata: y\n\n", []event{{"message", []byte("y"), "", 5, false, nil}}, io.EOF},
		{"field name too long", strings.Repeat("x", 100) + ": 1\ndata: y\n\n", []event{{"message", []byte("y"), "", -1, false, nil}}, io.EOF},
		{"id too long, cut off", "id: " + strings.Repeat("x", 100), nil, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := readAll(newSSEReader(strings.NewReader(tc.in), 64))
			if !errors.Is(err, tc.err) {
				t.Errorf("error = %v, want %v", err, tc.err)
			}
			if !reflect.DeepEqual(evs, tc.want) {
				t.Errorf("events = %+v, want %+v", evs, tc.want)
			}
		})
	}
}

func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		"data: {}\n\n",
		"event: message\r\nid: 1\r\ndata: a\r\ndata: b\r\n\r\n",
		": c\rretry: 10\rdata\r\r",
		"\xef\xbb\xbfid: \x00\ndata: x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		const max = 1 << 10
		r := newSSEReader(strings.NewReader(in), max)
		for range len(in) + 1 {
			ev, err := r.next()
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if ev.Type == "" || len(ev.Data) > max || ev.Retry < -1 || strings.ContainsRune(ev.ID, 0) {
				t.Fatalf("bad event %+v", ev)
			}
			if strings.ContainsAny(ev.Type, "\r\n") || strings.ContainsAny(ev.ID, "\r\n") {
				t.Fatalf("line break in a field: %+v", ev)
			}
		}
		t.Fatalf("more events than input bytes")
	})
}

func TestServerRetryIsBounded(t *testing.T) {
	for ms, want := range map[int]time.Duration{0: 0, 1500: 1500 * time.Millisecond, math.MaxInt: maxServerRetry} {
		if got := serverRetry(ms); got != want {
			t.Errorf("serverRetry(%d) = %v, want %v", ms, got, want)
		}
	}
}

// TestSSEReaderKeepsTheHeadOnly: data that passes the limit at a line of
// its own, after lines longer than the head, comes as its first headSize
// bytes only.
func TestSSEReaderKeepsTheHeadOnly(t *testing.T) {
	first, second := strings.Repeat("a", 1500), strings.Repeat("b", 1000)
	r := newSSEReader(strings.NewReader("data: "+first+"\ndata: "+second+"\n\n"), 2000)
	ev, err := r.next()
	if err != nil {
		t.Fatal(err)
	}
	if !ev.TooLarge || string(ev.Data) != first[:headSize] {
		t.Fatalf("got %d bytes, too large %v; want the first %d bytes of the data, too large", len(ev.Data), ev.TooLarge, headSize)
	}
}

// eventThenStall gives its event, then stands for a server that sends
// nothing more until the event is acted on: a read past it fails t.
type eventThenStall struct {
	t    *testing.T
	data string
}

func (r *eventThenStall) Read(p []byte) (int, error) {
	if r.data == "" {
		r.t.Error("read past the end of the event before returning it")
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestSSEReaderLoneCR: an event whose lines end with a lone CR comes
// as soon as its blank line is read, not when more bytes follow: the
// server may be waiting for the answer to a request it holds.
func TestSSEReaderLoneCR(t *testing.T) {
	r := newSSEReader(&eventThenStall{t: t, data: "id: 1\rdata: {}\r\r"}, 64)
	ev, err := r.next()
	if err != nil || string(ev.Data) != "{}" || ev.ID != "1" {
		t.Fatalf("next() = %+v, %v; want the event", ev, err)
	}
}

// TestSSEReaderCRLFByteByByte: the LF of a CRLF that comes in a read
// of its own is still part of the line ending, after a line cut too.
func TestSSEReaderCRLFByteByByte(t *testing.T) {
	in := "data: a\r\ndata: " + strings.Repeat("x", 100) + "\r\n: c\r\n\r\ndata: b\r\n\r\n"
	evs, err := readAll(newSSEReader(iotest.OneByteReader(strings.NewReader(in)), 64))
	if err != io.EOF || len(evs) != 2 || !evs[0].TooLarge || string(evs[1].Data) != "b" {
		t.Fatalf("events = %+v, %v; want one too large, then b", evs, err)
	}
}
