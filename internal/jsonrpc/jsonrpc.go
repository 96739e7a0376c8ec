// Package jsonrpc decodes JSON-RPC 2.0 frames just far enough to route them.
//
// A proxy must hand on what it does not own exactly as it came, so a Message
// keeps the frame's original bytes and its id as raw JSON: "1", "1.0" and
// "\"1\"" are three different ids and stay so. Only the fields needed to
// route a frame are decoded; everything else stays in Raw.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Standard JSON-RPC 2.0 error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// A Message is one decoded frame. A Message is read-only once decoded: Raw
// is the caller's frame, and ID, Params, Result and Error may be shared
// with other Messages; none must be modified in place.
type Message struct {
	// Raw is the frame exactly as received, without its delimiter.
	Raw []byte
	// ID is the request or response id as raw JSON, or nil for a
	// notification.
	ID json.RawMessage
	// Method is set for requests and notifications.
	Method string
	// Params, Result and Error are the raw members, nil when absent.
	Params json.RawMessage
	Result json.RawMessage
	Error  json.RawMessage
	// Batch is set when the frame is a JSON array (a JSON-RPC batch); no
	// other field but Raw is then decoded.
	Batch bool
	// Version is the raw "jsonrpc" member, nil when absent.
	Version json.RawMessage
}

// CheckRequest returns why m, a request or notification a client sent, is
// not one that MCP allows, or "" if it is: its "jsonrpc" member must be
// "2.0", a request's id valid (ValidID), and a tools/call a request.
func CheckRequest(m *Message) string {
	if why := checkVersion(m); why != "" {
		return why
	}
	if m.ID == nil && m.Method == "tools/call" {
		// Passed on, the tool would run unrecorded, and its caller would
		// never learn the outcome: no answer goes to a notification.
		return "tools/call is a request and needs an id; without one it was not sent"
	}
	if m.ID != nil && !ValidID(m.ID) {
		if m.ID[0] == '"' {
			return "request id is a string that is not UTF-8"
		}
		return fmt.Sprintf("request id %s is not a string or an integer", truncate(string(m.ID), 40))
	}
	return ""
}

// CheckResponse returns why m, an answer a client sent to a server's
// request (no method, an id), is not one that a server can read, or "" if
// it is: its "jsonrpc" member "2.0", its id valid, and exactly one of a
// result and an error, an error being an object with a numeric code and a
// string message. A server's decoder may end the session on anything
// else.
func CheckResponse(m *Message) string {
	switch {
	case checkVersion(m) != "":
		return `"jsonrpc" must be "2.0"`
	case !ValidID(m.ID):
		return fmt.Sprintf("id %s is not a string or an integer", truncate(string(m.ID), 40))
	case m.Result == nil && m.Error == nil:
		return "it has an id, but neither a method, a result nor an error"
	case m.Result != nil && m.Error != nil:
		return "it has both a result and an error"
	case m.Error != nil && !wholeError(m.Error):
		return "its error is not an object with a numeric code and a string message"
	}
	return ""
}

// wholeError reports whether raw is an error object with a numeric code
// of integer value and a string message, whatever their values.
func wholeError(raw json.RawMessage) bool {
	var e struct {
		Code    json.RawMessage `json:"code"`
		Message *string         `json:"message"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Message == nil || len(e.Code) == 0 || string(e.Code) == "null" {
		return false
	}
	_, ok := errorCode(e.Code)
	return ok
}

// checkVersion returns why m's "jsonrpc" member is not "2.0", or "".
func checkVersion(m *Message) string {
	if string(m.Version) != `"2.0"` {
		if v, ok := StringValue(m.Version); !ok || v != "2.0" {
			return `"jsonrpc" must be "2.0"`
		}
	}
	return ""
}

// ValidID reports whether id may be a request's id in MCP: a string or an
// integer, a string being UTF-8 as JSON requires. MCP allows no null id,
// and a fractional one may come back from a server rounded, matching no
// request. A number spelled with an integer
// value, such as 1.0, is allowed: IDKey matches it.
func ValidID(id json.RawMessage) bool {
	switch {
	case len(id) == 0:
		return false
	case id[0] == '"':
		// A server that decodes it turns invalid UTF-8 into U+FFFD and
		// answers under another id than the one the client sent.
		return utf8.Valid(id)
	case id[0] == '-' || id[0] >= '0' && id[0] <= '9':
		// An integer by its exact value, not a double's: 1.0000000000000000001
		// reads as 1 in a double, and a server would answer it under 1.
		spelled, exp := numberShape(id)
		if !spelled {
			return true
		}
		if _, err := strconv.ParseFloat(string(id), 64); err != nil {
			return false // beyond a double's range
		}
		r := exactNumber(id, exp)
		return r != nil && r.IsInt()
	default:
		return false
	}
}

// PortableID reports whether a valid id (ValidID) comes back as it went
// from any server: an integer that a double holds exactly (a server in
// JavaScript reads numbers as doubles, one in Go may read them as int64:
// 9007199254740993 came back as 9007199254740992), or a string without a
// lone surrogate escape ("\ud800", which a decoder turns into U+FFFD).
// An id that is not portable would be answered under another one, and
// its request never answered.
func PortableID(id json.RawMessage) bool {
	if len(id) == 0 || id[0] != '"' {
		if shortInteger(id) {
			return true // the common case, without a parse
		}
		f, err := strconv.ParseFloat(string(id), 64)
		return err == nil && math.Abs(f) <= 1<<53-1
	}
	s := id[1 : len(id)-1]
	for i := 0; i+5 < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if s[i+1] != 'u' {
			i++ // an escape of one character: skip it
			continue
		}
		r, err := strconv.ParseUint(string(s[i+2:i+6]), 16, 32)
		switch {
		case err != nil:
			return false
		case r >= 0xdc00 && r <= 0xdfff:
			return false // a low surrogate with no high one before it
		case r >= 0xd800 && r <= 0xdbff:
			// A high surrogate must be followed by a low one.
			if i+12 > len(s) || s[i+6] != '\\' || s[i+7] != 'u' {
				return false
			}
			lo, err := strconv.ParseUint(string(s[i+8:i+12]), 16, 32)
			if err != nil || lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 11
		default:
			i += 5
		}
	}
	return true
}

// shortInteger reports whether id is an integer of at most 15 digits,
// which a double holds exactly: its magnitude is below 10^15 < 2^53.
func shortInteger(id []byte) bool {
	if len(id) > 0 && id[0] == '-' {
		id = id[1:]
	}
	if len(id) == 0 || len(id) > 15 {
		return false
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// IsRequest reports whether m is a request: a method and an id.
func (m *Message) IsRequest() bool { return m.Method != "" && m.ID != nil }

// IsNotification reports whether m is a notification: a method, no id.
func (m *Message) IsNotification() bool { return m.Method != "" && m.ID == nil }

// IsResponse reports whether m is a response: an id and no method.
func (m *Message) IsResponse() bool { return m.Method == "" && m.ID != nil && !m.Batch }

// ErrNotObject is returned by Decode for a frame that is valid JSON but
// neither an object nor an array.
var ErrNotObject = errors.New("a JSON-RPC message must be a JSON object or array")

// ErrNotObjectInBatch is returned by DecodeBatch for an element that is
// valid JSON but neither an object nor an array.
var ErrNotObjectInBatch = errors.New("a JSON-RPC message in a batch must be a JSON object")

// Decode parses frame. The returned Message refers to frame's memory.
func Decode(frame []byte) (*Message, error) {
	m := new(Message)
	if err := DecodeInto(m, frame); err != nil {
		return nil, err
	}
	return m, nil
}

// TooDeep reports whether err, from Decode, refuses JSON nested past the
// decoders' limit of 10,000 levels: valid JSON, which another reader may
// take. It goes by encoding/json's words, as its SyntaxError has no field
// for the reason.
func TooDeep(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se) && strings.HasSuffix(se.Error(), "exceeded max depth")
}

// bom is the UTF-8 byte order mark, which JSON sent over a network must
// not start with (RFC 8259, section 8.1).
const bom = "\xef\xbb\xbf"

// invalidJSON returns the error for frame, which is not valid JSON,
// saying what is wrong with it after what: where it went wrong, or that
// it starts with a byte order mark, which an editor or a Windows tool
// may add and which is invisible where the message is looked at.
func invalidJSON(frame []byte, what string) error {
	if bytes.HasPrefix(bytes.TrimLeft(frame, " \t\r\n"), []byte(bom)) {
		return fmt.Errorf("%s: it starts with a UTF-8 byte order mark (EF BB BF), which JSON-RPC messages must not", what)
	}
	var v json.RawMessage
	return fmt.Errorf("%s: %w", what, json.Unmarshal(frame, &v))
}

// DecodeInto is Decode into m, for a caller that keeps the Message where
// it likes (on its stack). On an error m is left part filled.
func DecodeInto(m *Message, frame []byte) error {
	return DecodeParamsInto(m, frame, nil)
}

// DecodeParamsInto is DecodeInto that hands each member of the message's
// params, if they are an object, to params (which must return true) as
// it validates them, in the order they come: a caller that reads them
// needs no second walk over the params (see EachMember). It is called
// before the message is known to be whole or to be a request, so what it
// is handed counts only once DecodeParamsInto returns nil. nil params is
// DecodeInto.
func DecodeParamsInto(m *Message, frame []byte, params func(name, value []byte) bool) error {
	start := skipSpace(frame, 0)
	if start == len(frame) {
		return errors.New("empty message")
	}
	switch frame[start] {
	case '[':
		if !Valid(frame) {
			return invalidJSON(frame, "invalid JSON in batch")
		}
		*m = Message{Raw: frame, Batch: true}
		return nil
	case '{':
	default:
		if !Valid(frame) {
			return invalidJSON(frame, "invalid JSON")
		}
		return ErrNotObject
	}
	// One pass checks the frame and finds its members. Member names are
	// matched exactly (see EachMember): a frame must route here as the
	// upstream will read it.
	*m = Message{Raw: frame}
	methodRaw, repeated, end := walkMessage(m, frame, start, params)
	if end < 0 || skipSpace(frame, end) != len(frame) {
		return invalidJSON(frame, "invalid JSON")
	}
	if repeated != nil {
		return Ambiguous(repeated, envelope)
	}
	if methodRaw != nil && string(methodRaw) != "null" {
		if method := knownMethod(methodRaw); method != "" {
			m.Method = method
			return nil
		}
		method, ok := StringValue(methodRaw)
		if !ok {
			return fmt.Errorf("invalid method: %s is not a string", truncate(string(methodRaw), 40))
		}
		m.Method = method
	}
	return nil
}

// knownMethods holds the methods of MCP, quoted, so that Decode can
// return the name without a copy of it per frame: a method's raw value
// is compared with the few of its length, where a map hashed it first,
// and with tools/call, the one this proxy exists for, first. Only a name
// spelled without escapes matches one; any other goes through
// StringValue. The array's length is one more than the longest quoted
// name's: a longer name added to the list fails every start, and test.
var knownMethods = func() (byLen [42][]string) {
	for _, name := range []string{
		"tools/call", "initialize", "ping", "tools/list", "resources/list", "resources/read",
		"resources/templates/list", "resources/subscribe", "resources/unsubscribe", "prompts/list",
		"prompts/get", "completion/complete", "logging/setLevel", "sampling/createMessage",
		"elicitation/create", "roots/list", "tasks/get", "tasks/result", "tasks/list", "tasks/cancel",
		"notifications/initialized", "notifications/cancelled", "notifications/progress",
		"notifications/message", "notifications/tools/list_changed", "notifications/resources/list_changed",
		"notifications/resources/updated", "notifications/prompts/list_changed",
		"notifications/roots/list_changed", "notifications/tasks/status",
	} {
		quoted := `"` + name + `"`
		byLen[len(quoted)] = append(byLen[len(quoted)], quoted)
	}
	return byLen
}()

// knownMethod returns the method of MCP that raw, a method's raw value,
// names, or "" if it names none or is spelled with escapes.
func knownMethod(raw []byte) string {
	if len(raw) >= len(knownMethods) {
		return ""
	}
	for _, quoted := range knownMethods[len(raw)] {
		if string(raw) == quoted {
			return quoted[1 : len(quoted)-1]
		}
	}
	return ""
}

// DecodeBatch decodes the elements of a batch frame.
func DecodeBatch(frame []byte) ([]*Message, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(frame, &elems); err != nil {
		return nil, fmt.Errorf("invalid batch: %w", err)
	}
	msgs := make([]*Message, 0, len(elems))
	for i, e := range elems {
		m, err := Decode(e)
		if errors.Is(err, ErrNotObject) {
			return nil, fmt.Errorf("batch element %d: %w", i, ErrNotObjectInBatch)
		}
		if err != nil {
			return nil, fmt.Errorf("batch element %d: %w", i, err)
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// An Error is a JSON-RPC error object.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
	// Raw is the error object as it came, when the Error was decoded
	// from one (DecodeError); Object passes it on unchanged. Whoever
	// changes the other fields of a decoded Error sets it to nil.
	Raw json.RawMessage `json:"-"`
}

// Object returns the error object for the wire: as it came, if it was
// decoded from one, so that a peer's error passes on unchanged (members
// of its own, spelling and all); else the fields, marshalled.
func (e *Error) Object() json.RawMessage {
	if e.Raw != nil {
		return e.Raw
	}
	b, _ := json.Marshal(e) // a Data of valid JSON always marshals
	return b
}

func (e *Error) Error() string {
	return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message)
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// null is the id of an error response to a request whose id could not be
// read (JSON-RPC 2.0 section 5).
var null = json.RawMessage("null")

// NewResponse returns the bytes of a response carrying result under id.
// result must be valid JSON; it is copied as is. A nil id or result becomes
// null.
func NewResponse(id, result json.RawMessage) []byte {
	return AppendResponse(make([]byte, 0, len(result)+len(id)+36), id, result)
}

// AppendResponse appends the bytes NewResponse returns to b.
func AppendResponse(b []byte, id, result json.RawMessage) []byte {
	if result == nil {
		result = null
	}
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, orNull(id)...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}

// NewErrorResponse returns the bytes of an error response under id; a nil id
// becomes null.
func NewErrorResponse(id json.RawMessage, e *Error) []byte {
	eb, err := json.Marshal(e)
	if err != nil {
		// Only Data can fail to marshal, and it is raw JSON we made.
		eb = []byte(`{"code":` + strconv.Itoa(e.Code) + `,"message":"internal error"}`)
	}
	return NewRawErrorResponse(id, eb)
}

// NewRawErrorResponse is NewErrorResponse for an error object already in
// JSON form, such as one received from another peer.
func NewRawErrorResponse(id, errObj json.RawMessage) []byte {
	b := make([]byte, 0, len(errObj)+len(id)+36)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, orNull(id)...)
	b = append(b, `,"error":`...)
	b = append(b, errObj...)
	return append(b, '}')
}

// NewRequest returns the bytes of a request. params may be nil. A nil id
// makes a notification: the id member is left out, never written empty.
func NewRequest(id json.RawMessage, method string, params json.RawMessage) []byte {
	return AppendRequest(make([]byte, 0, len(params)+len(id)+len(method)+50), id, method, params)
}

// AppendRequest appends the bytes NewRequest returns to b.
func AppendRequest(b []byte, id json.RawMessage, method string, params json.RawMessage) []byte {
	b = append(b, `{"jsonrpc":"2.0"`...)
	if id != nil {
		b = append(b, `,"id":`...)
		b = append(b, id...)
	}
	return AppendRequestTail(b, method, params)
}

// AppendRequestTail appends what follows a request's id: the bytes
// AppendRequest appends after `{"jsonrpc":"2.0","id":ID`.
func AppendRequestTail(b []byte, method string, params json.RawMessage) []byte {
	b = append(b, `,"method":`...)
	b = AppendString(b, method)
	if params != nil {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// AppendString appends s as json.Marshal writes it. A method name is
// plain ASCII that needs no escape, and is copied between quotes as it is;
// anything else goes through json.Marshal, so the bytes are the same
// either way (TestAppendString).
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainASCII[s[i]] {
			mb, _ := json.Marshal(s) // a string always marshals
			return append(b, mb...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainASCII holds the bytes json.Marshal copies into a string as they
// are: a table costs a load a byte where the seven tests cost a branch
// each, on a replay's every string.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

func orNull(id json.RawMessage) json.RawMessage {
	if id == nil {
		return null
	}
	return id
}

// DecodeError decodes a raw error member. A member that is not an error
// object yields a generic error that keeps the raw text.
func DecodeError(raw json.RawMessage) *Error {
	if e, ok := ErrorObject(raw); ok {
		return e
	}
	return &Error{Code: CodeInternalError, Message: "malformed error: " + truncate(string(raw), 200)}
}

// ErrorObject decodes a raw error member, and reports whether it is an
// error object: its code, if any, a number of integer value, and a code
// or a message that is not empty.
func ErrorObject(raw json.RawMessage) (*Error, bool) {
	var e struct {
		Code    json.RawMessage `json:"code"`
		Message *string         `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &e); err == nil {
		code, ok := errorCode(e.Code)
		var message string
		if e.Message != nil {
			message = *e.Message
		}
		if ok && (code != 0 || message != "") {
			out := &Error{Code: code, Message: message, Data: e.Data}
			if len(e.Code) > 0 && string(e.Code) != "null" && e.Message != nil {
				// A whole error object, its code a number and its
				// message a string: it goes on as it came. Copied, so
				// that it does not keep the rest of its frame.
				out.Raw = bytes.Clone(raw)
			}
			return out, true
		}
	}
	return nil, false
}

// errorCode reads an error's code: absent or null is 0; a number of
// integer value (-32000, or -32000.0) is that integer; anything else is
// not a code.
func errorCode(raw json.RawMessage) (int, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, true
	}
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, false // a string, however numeric, is no code
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if code := int(f); err == nil && float64(code) == f && math.Abs(f) <= 1<<53 {
		return code, true
	}
	return 0, false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
