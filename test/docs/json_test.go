package docs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSONExamples checks that every ```json block of the pages is JSON,
// so that a client configuration a reader pastes (Claude Desktop, Cursor,
// VS Code, npx) loads. A block that shows members of a larger object, as
// a result's "_meta": {...}, is read inside braces.
func TestJSONExamples(t *testing.T) {
	found := 0
	for _, page := range pages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		var block []string
		start, in := 0, false
		for n, line := range strings.Split(string(data), "\n") {
			switch {
			case !in && strings.TrimSpace(line) == "```json":
				in, start, block = true, n+2, nil
			case in && strings.TrimSpace(line) == "```":
				in = false
				found++
				text := strings.Join(block, "\n")
				if !json.Valid([]byte(text)) && !json.Valid([]byte("{"+text+"}")) {
					t.Errorf("%s:%d: the ```json block is not JSON:\n%s", rel, start, text)
				}
			case in:
				block = append(block, line)
			}
		}
	}
	if found == 0 {
		t.Error("found no ```json blocks; the client configurations moved?")
	}
}
