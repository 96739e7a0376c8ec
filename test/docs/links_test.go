// Package docs holds tests of the documentation itself.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// link matches an inline Markdown link or image: [text](target).
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// heading matches an ATX heading and captures its text.
var heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// inlineLink matches [text](target) inside a heading, whose anchor is
// made from the text alone.
var inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// root is the repository, seen from this package.
var root = filepath.Join("..", "..")

// pages returns the Markdown pages whose links are checked: the README,
// docs/, and the READMEs of bench/ and the npm launcher.
func pages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"README.md", "bench/README.md", "npm/mcp-idempotent/README.md"} {
		pages = append(pages, filepath.Join(root, filepath.FromSlash(p)))
	}
	return pages
}

// prose calls fn with each line of the page that is outside a fenced
// code block, numbered from 1.
func prose(t *testing.T, page string, fn func(n int, line string)) {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	inFence := false
	for n, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if !inFence {
			fn(n+1, line)
		}
	}
}

// slug is the anchor GitHub gives a heading: its text lower-cased, links
// reduced to their text, punctuation but - and _ dropped, spaces made -.
func slug(text string) string {
	text = inlineLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of the page's headings. A heading whose
// slug came before gets -1, -2 and so on, as on GitHub.
func anchors(t *testing.T, page string) map[string]bool {
	t.Helper()
	seen := map[string]int{}
	out := map[string]bool{}
	prose(t, page, func(_ int, line string) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	})
	return out
}

// TestRelativeLinks checks that every relative link in the README, docs/
// and the other READMEs names a file or folder that exists, and that its
// #anchor, within the page or into another Markdown page, names a
// heading there, so that moving a page or renaming a section cannot
// leave a reader at a dead end.
func TestRelativeLinks(t *testing.T) {
	headings := map[string]map[string]bool{} // by cleaned path
	headingsOf := func(page string) map[string]bool {
		page = filepath.Clean(page)
		if headings[page] == nil {
			headings[page] = anchors(t, page)
		}
		return headings[page]
	}
	checked, fragments := 0, 0
	for _, page := range pages(t) {
		rel, _ := filepath.Rel(root, page)
		prose(t, page, func(n int, line string) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: link to %s: no such file", rel, n, target)
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(path, ".md") {
					continue
				}
				fragments++
				if !headingsOf(path)[frag] {
					t.Errorf("%s:%d: link to %s: no heading there has the anchor #%s", rel, n, target, frag)
				}
			}
		})
	}
	if checked == 0 || fragments == 0 {
		t.Errorf("found %d relative links, %d with an anchor, in the README and docs/; the pages moved?", checked, fragments)
	}
}

// TestSlug pins the anchors GitHub makes of the kinds of heading the
// pages use.
func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Shadow mode", "shadow-mode"},
		{"The 2026-07-28 stateless protocol", "the-2026-07-28-stateless-protocol"},
		{"What one call costs in instructions: `instructions.sh`", "what-one-call-costs-in-instructions-instructionssh"},
		{"2026-12-05, later: instructions, a round of cuts", "2026-12-05-later-instructions-a-round-of-cuts"},
		{"`on_unknown`", "on_unknown"},
		{"Put it in front of a server", "put-it-in-front-of-a-server"},
		{"See [errors](errors.md)", "see-errors"},
	} {
		if got := slug(c.heading); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}
