package mcp

import "encoding/json"

// TextResult returns a CallToolResult whose content is text, with meta
// (nil for none) as its _meta: the results the proxy makes itself.
func TextResult(text string, isError bool, meta map[string]any) json.RawMessage {
	r := map[string]any{
		"content": []map[string]string{{"type": "text", "text": text}},
		"isError": isError,
	}
	if meta != nil {
		r["_meta"] = meta
	}
	b, _ := json.Marshal(r)
	return b
}

// WithText returns a copy of a tool result with one more text content
// item; a result that cannot be read comes back as it was.
func WithText(result json.RawMessage, text string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(result, &obj) != nil || obj == nil {
		return result
	}
	var content []json.RawMessage
	_ = json.Unmarshal(obj["content"], &content)
	item, _ := json.Marshal(map[string]string{"type": "text", "text": text})
	obj["content"], _ = json.Marshal(append(content, item))
	out, err := json.Marshal(obj)
	if err != nil {
		return result
	}
	return out
}

// Texts returns the texts of a tool result's text content items.
func Texts(result json.RawMessage) []string {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(result, &r) // not a result with content: no texts
	var texts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			texts = append(texts, c.Text)
		}
	}
	return texts
}
