package mcp

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSchemaCaseTwins: the twins are the declared properties that differ
// from another only in case, as strings.EqualFold compares them, at the
// top level and along the given paths; nothing else is kept.
func TestSchemaCaseTwins(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{
		"region":{"default":"us"},"Region":{},"REGION":{},"amount":{},
		"k":{},"\u212a":{},"s":{},"\u017f":{},
		"\ud800x":{},"\ufffdX":{},
		"trace":{"properties":{"id":{},"ID":{},"span":{"properties":{"a":{},"A":{}}}}},
		"Trace":{"properties":{"x":{},"X":{}}},
		"ref":{"$ref":"#/$defs/r"},
		"plain":{"properties":{"a":{},"b":{}}}}}`)
	c := SchemaCaseTwins(schema, []string{"trace.span.a", "trace.id", "plain.a", "ref.a", "amount.x"})
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"region", "Region", true},
		{"Region", "REGION", true},
		{"region", "REGIoN", false}, // not declared
		{"amount", "Amount", false},
		{"k", "\u212a", true}, // the Kelvin sign folds to k
		{"s", "\u017f", true}, // so does the long s to s
		{"\ufffdx", "\ufffdX", false},
	} {
		if got := c.Declared(tt.a, tt.b); got != tt.want {
			t.Errorf("Declared(%q, %q) = %v; want %v", tt.a, tt.b, got, tt.want)
		}
	}
	trace := c.Under("trace")
	if !trace.Declared("id", "ID") || !trace.Under("span").Declared("a", "A") {
		t.Errorf("twins under trace not found: %+v", trace)
	}
	for _, name := range []string{"Trace", "plain", "ref", "amount", "region"} {
		if u := c.Under(name); u != nil {
			t.Errorf("Under(%q) = %+v; want nil (no path through it, or no twins there)", name, u)
		}
	}
	for _, s := range []string{``, `{}`, `{"properties":{"a":{},"b":{}}}`, `{"properties":[]}`, `not json`} {
		if c := SchemaCaseTwins(json.RawMessage(s), []string{"a.b"}); c != nil {
			t.Errorf("SchemaCaseTwins(%s) = %+v; want nil", s, c)
		}
	}
}

// TestFoldKey: two names share a fold key exactly when strings.EqualFold
// takes them for one, as the proxy compares argument names.
func TestFoldKey(t *testing.T) {
	names := []string{"a", "A", "k", "K", "\u212a", "s", "S", "\u017f", "ss", "\u00df", "\u1e9e",
		"\u03c3", "\u03a3", "\u03c2", "\u0130", "i", "I", "\u0131", "\u01c5", "\u01c4", "\u01c6", "Ab", "aB"}
	for _, a := range names {
		for _, b := range names {
			if got, want := foldKey(a) == foldKey(b), strings.EqualFold(a, b); got != want {
				t.Errorf("foldKey(%q) == foldKey(%q) is %v; EqualFold says %v", a, b, got, want)
			}
		}
	}
}
