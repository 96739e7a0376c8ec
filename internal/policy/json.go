package policy

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"

	"go.yaml.in/yaml/v3"
)

// Limits on recover.arguments, which may use aliases: they keep a
// "billion laughs" file or an alias cycle from exhausting the proxy.
const (
	maxArgumentNodes = 10000
	maxArgumentDepth = 64
)

// A jsonConv converts a YAML node to JSON text, keeping mapping order.
type jsonConv struct {
	d      *decoder
	root   *yaml.Node // the value converted, where size errors point
	field  string
	budget int // nodes left to convert
}

func (c *jsonConv) value(b *bytes.Buffer, n *yaml.Node, field string, depth int) bool {
	n = resolve(n)
	if !c.d.spend(1, n) {
		return false
	}
	c.budget--
	if c.budget < 0 || depth > maxArgumentDepth {
		if c.budget == -1 || depth == maxArgumentDepth+1 {
			c.d.errorf(c.root, c.field, "too large or too deep: more than %d values or %d levels, counting aliases", maxArgumentNodes, maxArgumentDepth)
		}
		c.budget = -2 // report once
		return false
	}
	switch n.Kind {
	case yaml.MappingNode:
		nerrs := c.d.found
		fields, _ := c.d.mapping(n, field, "a mapping")
		if c.d.found > nerrs {
			return false // a duplicate key or a key that is not a name
		}
		b.WriteByte('{')
		for i, kv := range fields {
			if i > 0 {
				b.WriteByte(',')
			}
			if !c.d.readText(kv.key.Value, kv.key) {
				return false
			}
			writeJSONString(b, kv.key.Value)
			b.WriteByte(':')
			if !c.value(b, kv.val, field+"."+fieldName(kv.key.Value), depth+1) {
				return false
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if !c.value(b, e, indexField(field, i), depth+1) {
				return false
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		return c.d.readText(n.Value, n) && c.scalar(b, n, field)
	default:
		c.d.errorf(n, field, "cannot be converted to JSON")
		return false
	}
	return true
}

func (c *jsonConv) scalar(b *bytes.Buffer, n *yaml.Node, field string) bool {
	switch n.ShortTag() {
	case "!!null":
		b.WriteString("null")
	case "!!int", "!!float":
		if isJSONNumber(n.Value) {
			// As written: big integers stay exact, JSON numbers have no
			// size limit.
			b.WriteString(n.Value)
			return true
		}
		if n.ShortTag() == "!!int" {
			// YAML spellings JSON lacks: 0x1F, 0o17, 1_000, +5.
			if i, ok := new(big.Int).SetString(n.Value, 0); ok {
				b.WriteString(i.String())
				return true
			}
		}
		fallthrough
	case "!!bool":
		var v any
		if err := n.Decode(&v); err != nil {
			c.d.errorf(n, field, "%q: %v", n.Value, err)
			return false
		}
		if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
			c.d.errorf(n, field, "%q is not a number JSON can hold", n.Value)
			return false
		}
		j, err := json.Marshal(v)
		if err != nil {
			c.d.errorf(n, field, "%q is not a value JSON can hold", n.Value)
			return false
		}
		b.Write(j)
	case "!!str", "!!timestamp", "!!binary":
		// Timestamps and binary stay the text written: JSON has neither.
		writeJSONString(b, n.Value)
	default:
		if n.Style&yaml.TaggedStyle == 0 {
			// A tag written out is refused by checkTags already.
			c.d.errorf(n, field, "YAML tag %s cannot be converted to JSON", n.Tag)
		}
		return false
	}
	return true
}

// isJSONNumber reports whether s is a number in JSON's own spelling.
func isJSONNumber(s string) bool {
	if s == "" || s[0] != '-' && (s[0] < '0' || s[0] > '9') {
		return false
	}
	var num json.Number
	return json.Unmarshal([]byte(s), &num) == nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	j, _ := json.Marshal(s) // a string always marshals
	b.Write(j)
}
