package mcp

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// CaseTwins are the properties an inputSchema declares beside another
// that differs from it only in case ("region" and "Region"): a server
// reads such twins apart, as they are distinct properties (Go's
// encoding/json prefers the exact name). Only twins are kept, so nearly
// every schema has none and costs nothing. A nil *CaseTwins holds none.
type CaseTwins struct {
	names map[string]struct{} // declared here, each beside a case twin
	sub   map[string]*CaseTwins
}

// Declared reports whether a and b, which differ only in case, are both
// properties the schema declares at this level.
func (c *CaseTwins) Declared(a, b string) bool {
	if c == nil {
		return false
	}
	_, okA := c.names[a]
	_, okB := c.names[b]
	return okA && okB
}

// Under returns the twins among the properties of the declared object
// property name.
func (c *CaseTwins) Under(name string) *CaseTwins {
	if c == nil {
		return nil
	}
	return c.sub[name]
}

// SchemaCaseTwins returns the case twins an inputSchema declares under
// its top-level properties, and under the properties of each nested
// object that one of paths (member names joined by dots, as a policy's
// ignore paths) goes through; nil when there are none. As in
// SchemaDefaults, only properties are followed: never $ref, allOf, anyOf
// or oneOf. Only the levels paths reach are read, so the work is bounded
// by the schema's size times the paths' length.
func SchemaCaseTwins(schema json.RawMessage, paths []string) *CaseTwins {
	if !json.Valid(schema) {
		return nil
	}
	split := make([][]string, 0, len(paths))
	for _, p := range paths {
		split = append(split, strings.Split(p, "."))
	}
	return caseTwinsAt(schema, split)
}

func caseTwinsAt(schema []byte, paths [][]string) *CaseTwins {
	props, ok := object(jsonrpc.Member(schema, "properties"))
	if !ok {
		return nil
	}
	byFold := make(map[string][]string)
	schemas := make(map[string][]byte)
	jsonrpc.EachMember(props, func(name, sch []byte) bool {
		n := string(name)
		// A name that is not UTF-8, or escapes a lone surrogate, reads
		// as U+FFFD here, and may not be the name the server declares.
		if strings.ContainsRune(n, utf8.RuneError) {
			return true
		}
		if _, seen := schemas[n]; !seen {
			k := foldKey(n)
			byFold[k] = append(byFold[k], n)
		}
		schemas[n] = sch
		return true
	})
	var c CaseTwins
	for _, names := range byFold {
		if len(names) < 2 {
			continue
		}
		if c.names == nil {
			c.names = make(map[string]struct{})
		}
		for _, n := range names {
			c.names[n] = struct{}{}
		}
	}
	followed := make(map[string]bool)
	for _, p := range paths {
		sch, ok := schemas[p[0]]
		if len(p) < 2 || !ok || followed[p[0]] {
			continue
		}
		followed[p[0]] = true
		var rest [][]string
		for _, q := range paths {
			if len(q) > 1 && q[0] == p[0] {
				rest = append(rest, q[1:])
			}
		}
		if t := caseTwinsAt(sch, rest); t != nil {
			if c.sub == nil {
				c.sub = make(map[string]*CaseTwins)
			}
			c.sub[p[0]] = t
		}
	}
	if c.names == nil && c.sub == nil {
		return nil
	}
	return &c
}

// foldKey returns s with each rune replaced by the least rune of its case
// folding orbit: foldKey(a) == foldKey(b) exactly when strings.EqualFold
// (a, b), as the proxy compares argument names.
func foldKey(s string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, s)
}
