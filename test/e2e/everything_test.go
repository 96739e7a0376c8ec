package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// everythingServer is the command line of @modelcontextprotocol/server-everything
// in stdio mode, from test/npm/node_modules. It skips the test when the
// package or node is missing, or fails it under MCPI_REQUIRE_SERVICES=1.
func everythingServer(t *testing.T) []string {
	t.Helper()
	// The package's "bin" entry, mcp-server-everything.
	node, entry := nodePeer(t, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	return []string{node, entry, "stdio"}
}

// sameJSON fails the test unless got and want marshal to the same JSON.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("%s: marshalling the proxied result: %v", what, err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatalf("%s: marshalling the direct result: %v", what, err)
	}
	if string(g) != string(w) {
		t.Errorf("%s differs through the proxy:\nproxied: %s\ndirect:  %s", what, g, w)
	}
}

// TestEverythingThroughProxy drives @modelcontextprotocol/server-everything
// through the proxy and, side by side, directly, and compares what the
// client sees. Nothing here is a side effect called twice, so nothing may
// differ: the proxy passes every non-tools/call message through unchanged,
// and a first tools/call is the server's own answer.
func TestEverythingThroughProxy(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	server := everythingServer(t)
	px := connect(t, ctx, proxied(t, server...))
	bare := connect(t, ctx, unproxied(server...))

	t.Run("lists", func(t *testing.T) { testEverythingLists(t, ctx, px, bare) })
	t.Run("tool calls", func(t *testing.T) { testEverythingToolCalls(t, ctx, px, bare) })
	t.Run("prompt and resource", func(t *testing.T) { testEverythingPromptAndResource(t, ctx, px, bare) })
}

// testEverythingLists: the catalogue calls.
func testEverythingLists(t *testing.T, ctx context.Context, px, bare *peer) {
	for _, tc := range []struct {
		name string
		list func(*peer) (any, error)
	}{
		{"tools/list", func(p *peer) (any, error) { return p.ListTools(ctx, nil) }},
		{"prompts/list", func(p *peer) (any, error) { return p.ListPrompts(ctx, nil) }},
		{"resources/list", func(p *peer) (any, error) { return p.ListResources(ctx, nil) }},
		{"resources/templates/list", func(p *peer) (any, error) { return p.ListResourceTemplates(ctx, nil) }},
	} {
		want, err := tc.list(bare)
		if err != nil {
			t.Fatalf("%s directly: %v", tc.name, err)
		}
		got, err := tc.list(px)
		if err != nil {
			t.Errorf("%s through the proxy: %v", tc.name, err)
			continue
		}
		sameJSON(t, tc.name, got, want)
	}
}

// testEverythingToolCalls calls simple tools once each (a second identical
// call through the proxy could be a replay) and compares the answers.
func testEverythingToolCalls(t *testing.T, ctx context.Context, px, bare *peer) {
	for _, call := range []struct {
		name string
		args map[string]any
	}{
		{"echo", map[string]any{"message": "hello through the proxy"}},
		{"get-sum", map[string]any{"a": 2, "b": 40}},
		{"get-annotated-message", map[string]any{"messageType": "error", "includeImage": false}},
		{"get-tiny-image", map[string]any{}},
	} {
		// A fresh params each time: the client adds _meta to the one it is given.
		params := func() *mcp.CallToolParams { return &mcp.CallToolParams{Name: call.name, Arguments: call.args} }
		want, err := bare.CallTool(ctx, params())
		if err != nil {
			t.Fatalf("%s directly: %v", call.name, err)
		}
		if want.IsError {
			t.Fatalf("%s directly: error result %s", call.name, answer(want))
		}
		got, err := px.CallTool(ctx, params())
		if err != nil {
			t.Errorf("%s through the proxy: %v", call.name, err)
			continue
		}
		if g, w := answer(got), answer(want); g != w {
			t.Errorf("%s differs through the proxy:\nproxied: %s\ndirect:  %s", call.name, g, w)
		}
		if replayed(got) {
			t.Errorf("%s: a first call is marked replayed; _meta = %s", call.name, metaJSON(got))
		}
	}
}

// testEverythingPromptAndResource compares prompts/get and resources/read.
// The resource is a static document: dynamic ones carry the time they were
// made.
func testEverythingPromptAndResource(t *testing.T, ctx context.Context, px, bare *peer) {
	prompt := &mcp.GetPromptParams{Name: "simple-prompt"}
	wantPrompt, err := bare.GetPrompt(ctx, prompt)
	if err != nil {
		t.Fatalf("prompts/get directly: %v", err)
	}
	if gotPrompt, err := px.GetPrompt(ctx, prompt); err != nil {
		t.Errorf("prompts/get through the proxy: %v", err)
	} else {
		sameJSON(t, "prompts/get simple-prompt", gotPrompt, wantPrompt)
	}

	resources, err := bare.ListResources(ctx, nil)
	if err != nil {
		t.Fatalf("resources/list directly: %v", err)
	}
	var uri string
	for _, r := range resources.Resources {
		if strings.HasPrefix(r.URI, "demo://resource/static/document/") {
			uri = r.URI
			break
		}
	}
	if uri == "" {
		t.Fatalf("no static document among %d resources", len(resources.Resources))
	}
	read := &mcp.ReadResourceParams{URI: uri}
	wantRes, err := bare.ReadResource(ctx, read)
	if err != nil {
		t.Fatalf("resources/read %s directly: %v", uri, err)
	}
	if gotRes, err := px.ReadResource(ctx, read); err != nil {
		t.Errorf("resources/read %s through the proxy: %v", uri, err)
	} else {
		sameJSON(t, "resources/read "+uri, gotRes, wantRes)
	}
}
