// Command respellserver is an MCP server over stdio, a test peer for
// progress tokens: it sends progress on each request that asks for it
// under the token spelled another way, as a server that decodes the
// token and encodes it again may (1.0 as 1, "a" as "\u0061"). Each
// request with a token gets one notifications/progress before its answer
// and one after it.
package main

import (
	"bufio"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"unicode/utf16"
)

type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ProtocolVersion string `json:"protocolVersion"`
		Meta            struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	} `json:"params"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	send := func(s string) {
		out.WriteString(s + "\n")
		out.Flush()
	}
	for in.Scan() {
		var m message
		if json.Unmarshal(in.Bytes(), &m) != nil || m.ID == nil || m.Method == "" {
			continue // a notification, or an answer
		}
		token := m.Params.Meta.ProgressToken
		progress := func(n int) {
			if token != nil {
				send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + respell(token) + `,"progress":` + strconv.Itoa(n) + `}}`)
			}
		}
		progress(1)
		send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":` + result(&m) + `}`)
		progress(2)
	}
}

// result is the result of request m.
func result(m *message) string {
	switch m.Method {
	case "initialize":
		v, _ := json.Marshal(m.Params.ProtocolVersion)
		return `{"protocolVersion":` + string(v) + `,"capabilities":{"tools":{},"prompts":{}},"serverInfo":{"name":"respell","version":"1"}}`
	case "tools/list":
		return `{"tools":[{"name":"work","inputSchema":{"type":"object"}}]}`
	case "tools/call":
		return `{"content":[{"type":"text","text":"worked"}]}`
	case "prompts/get":
		return `{"messages":[]}`
	}
	return `{}`
}

// respell returns the JSON token spelled another way: a string with each
// character escaped, a number with a fraction as an integer and an
// integer with a fraction.
func respell(token json.RawMessage) string {
	var s string
	if json.Unmarshal(token, &s) == nil {
		var b strings.Builder
		b.WriteByte('"')
		for _, u := range utf16.Encode([]rune(s)) {
			b.WriteString(`\u` + strconv.FormatInt(int64(u)|0x10000, 16)[1:])
		}
		return b.String() + `"`
	}
	t := string(token)
	if strings.ContainsAny(t, ".eE") {
		f, _ := strconv.ParseFloat(t, 64)
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return t + ".0"
}
