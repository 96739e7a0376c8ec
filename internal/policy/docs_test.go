package policy

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsExamplesParse checks every ```yaml block of the policy pages
// in docs/ and of the README with the parser the proxy uses, so that an
// example a reader copies is always a file the proxy accepts.
func TestDocsExamplesParse(t *testing.T) {
	pages, err := filepath.Glob("../../docs/policy*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../../README.md")
	found := 0
	for _, page := range pages {
		blocks, err := yamlBlocks(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			found++
			// Blank lines before the block make the parser's line
			// numbers those of the page.
			name := strings.TrimPrefix(page, "../../")
			data := append(bytes.Repeat([]byte("\n"), b.line-1), b.text...)
			if _, err := Parse(name, data); err != nil {
				t.Errorf("%s:%d: the example is not a valid policy file:\n%v", name, b.line, err)
			}
		}
	}
	// The policy reference and its cookbook hold a dozen examples: finding
	// none means the pages moved, not that they are right.
	if found < 9 {
		t.Errorf("found %d yaml examples in %q; want the policy pages' examples", found, pages)
	}
}

type docBlock struct {
	line int // of the block's first line of YAML, 1-based
	text []byte
}

// yamlBlocks returns the fenced ```yaml blocks of a Markdown file.
func yamlBlocks(path string) ([]docBlock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var blocks []docBlock
	var cur *docBlock
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```yaml":
			cur = &docBlock{line: n + 1}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text = append(cur.text, line+"\n"...)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a ```yaml block is not closed", path, cur.line-1)
	}
	return blocks, sc.Err()
}
