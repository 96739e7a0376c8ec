package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The reference servers a user is likely to put the proxy in front of
// first, from npm (pinned in test/npm): a retried call that changes
// something changes it once, and the retry gets the first answer.

func TestFilesystemRetriedEditRunsOnce(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(file, []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	node, entry := nodePeer(t, "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	p := connect(t, ctx, proxied(t, node, entry, dir))

	// edit_file is neither read-only nor idempotent: each run adds a line.
	edit := &mcp.CallToolParams{Name: "edit_file", Arguments: map[string]any{
		"path":  file,
		"edits": []any{map[string]any{"oldText": "one", "newText": "one\none"}},
	}}
	first, err := p.CallTool(ctx, edit)
	if err != nil || first.IsError {
		t.Fatalf("edit_file: %v %+v", err, first)
	}
	again, err := p.CallTool(ctx, edit)
	if err != nil {
		t.Fatalf("edit_file again: %v", err)
	}
	if !replayed(again) || firstText(again) != firstText(first) {
		t.Errorf("the retry got %q (replayed %v); want the first answer %q replayed", firstText(again), replayed(again), firstText(first))
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "one\none\n" {
		t.Errorf("the file holds %q (%v) after a retried edit; want %q, edited once", b, err, "one\none\n")
	}
}

func TestMemoryRetryGetsTheFirstAnswer(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	memory := filepath.Join(t.TempDir(), "memory.jsonl")
	node, entry := nodePeer(t, "node_modules", "@modelcontextprotocol", "server-memory", "dist", "index.js")
	cmd := proxied(t, node, entry)
	cmd.Env = append(cmd.Environ(), "MEMORY_FILE_PATH="+memory)
	p := connect(t, ctx, cmd)

	// Run again, create_entities answers with none created: the caller
	// that lost the first answer would never learn what was.
	create := &mcp.CallToolParams{Name: "create_entities", Arguments: map[string]any{
		"entities": []any{map[string]any{"name": "Ada", "entityType": "person", "observations": []any{"wrote the notes"}}},
	}}
	first, err := p.CallTool(ctx, create)
	if err != nil || first.IsError || !strings.Contains(firstText(first), "Ada") {
		t.Fatalf("create_entities: %v %+v; want Ada created", err, first)
	}
	again, err := p.CallTool(ctx, create)
	if err != nil {
		t.Fatalf("create_entities again: %v", err)
	}
	if !replayed(again) || firstText(again) != firstText(first) {
		t.Errorf("the retry got %q (replayed %v); want the first answer %q replayed", firstText(again), replayed(again), firstText(first))
	}
	if b, err := os.ReadFile(memory); err != nil || strings.Count(string(b), `"Ada"`) != 1 {
		t.Errorf("the memory file holds %q (%v); want Ada once", b, err)
	}
}
