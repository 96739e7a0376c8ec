package policy

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A decoder reads a policy file's node tree into specs (spec.go). It
// checks each value on its own, as its Go type needs: the shape (a
// mapping, a list, a scalar), the keys a mapping accepts, the spelling of
// a duration or an enum, a number's range. Whether values fit together
// (a scope in the defaults, a retry account the file defines) is for the
// validator. It goes on past every problem, to report them all.
type decoder struct {
	*problems
	step      int  // values and blocks read so far: see place
	work      int  // values walked, counting each alias followed
	exhausted bool // work went over maxWork, and that was reported
	text      int  // bytes of values read, counting each alias followed
	wordy     bool // text went over maxText, and that was reported
}

func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) {
	d.add(n, d.step, field, format, args...)
}

// A place is where a value or a block was written, and the step at
// which the decoder finished reading it. An error the validator finds
// there is ordered by that step among the decoder's errors at the same
// line and column (an anchor that two fields use), as if it had been
// found as the value was read: errors keep file order, then the order
// of the walk.
type place struct {
	at   *yaml.Node // nil when the file leaves the value out
	step int
}

// place returns the place of n, which the decoder has just read.
func (d *decoder) place(n *yaml.Node) place {
	p := place{at: n, step: d.step}
	d.step++
	return p
}

// maxWork bounds the values walked in the whole file, each alias counted
// every time it is followed: a rule used by a thousand aliases is walked
// a thousand times, and a mapping may merge another twice, which merges
// another twice...
const maxWork = 1_000_000

// A val is one value of the file, decoded: ok reports whether it could
// be read (the decoder said why not), and v holds it if so.
type val[T any] struct {
	place
	v  T
	ok bool
}

func good[T any](p place, v T) val[T] { return val[T]{place: p, v: v, ok: true} }

// failed is a value written but not read.
func failed[T any](p place) val[T] { return val[T]{place: p} }

// bad reports whether the value is written but could not be read.
func (x val[T]) bad() bool { return x.at != nil && !x.ok }

// or returns the value, or def when it is left out or could not be read.
func (x val[T]) or(def T) T {
	if x.ok {
		return x.v
	}
	return def
}

// A block is how one mapping of the file was read.
type block struct {
	place        // of the mapping, where errors about it as a whole go
	field string // its path, such as tools.charge_card.retry
	read  bool   // it is a mapping (an empty value is an empty one)
	known bool   // it holds only keys it accepts
}

// A key is a key that a mapping accepts, and how its value is read. A
// key with refuse set belongs elsewhere: it is refused with that reason,
// and not listed among the keys that an unknown one is told.
type key struct {
	name   string
	read   func(v *yaml.Node, field string) // v with aliases followed
	refuse string
}

// fields reads the mapping n through keys, which are listed in the order
// an error about an unknown key names them. want describes the mapping
// for the error that n is not one.
func (d *decoder) fields(n *yaml.Node, field, want string, keys []key) block {
	b := block{field: field}
	fs, ok := d.mapping(n, field, want)
	if !ok {
		b.place = d.place(resolve(n))
		return b
	}
	b.read, b.known = true, true
	for _, kv := range fs {
		i := slices.IndexFunc(keys, func(k key) bool { return k.name == kv.key.Value })
		switch {
		case i < 0:
			var valid []string
			for _, k := range keys {
				if k.refuse == "" {
					valid = append(valid, k.name)
				}
			}
			d.unknownKey(kv.key, field, valid)
			b.known = false
		case keys[i].refuse != "":
			d.errorf(kv.key, subField(field, kv.key.Value), "%s", keys[i].refuse)
			b.known = false
		default:
			keys[i].read(resolve(kv.val), subField(field, kv.key.Value))
		}
	}
	b.place = d.place(resolve(n))
	return b
}

// subField is the path of key name in field.
func subField(field, name string) string {
	if field == "" {
		return name
	}
	return field + "." + name
}

// unknownKey reports key k, which field does not accept; valid lists the
// keys it does.
func (d *decoder) unknownKey(k *yaml.Node, field string, valid []string) {
	d.errorf(k, field, "unknown key %q (valid: %s)", k.Value, strings.Join(valid, ", "))
}

// A field is one key and value of a mapping.
type field struct{ key, val *yaml.Node }

// mapping returns the fields of a mapping node, following aliases and
// expanding merge keys (<<), which the node API leaves to the caller. A
// null node is an empty mapping. It reports whether n is a mapping (want
// describes the mapping for that error); duplicate keys and keys that are
// not scalars are reported too, and left out of the fields, so the walk
// goes on to find every other error.
func (d *decoder) mapping(n *yaml.Node, field, want string) ([]field, bool) {
	return d.mappingIn(n, field, want, nil)
}

func (d *decoder) mappingIn(n *yaml.Node, fieldPath, want string, merging []*yaml.Node) ([]field, bool) {
	n = resolve(n)
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, fieldPath, "want %s, not %s", want, describe(n))
		return nil, false
	}
	if !d.spend(len(n.Content)/2, n) {
		return nil, false
	}
	if slices.Contains(merging, n) {
		d.errorf(n, fieldPath, "a merge (<<) includes the mapping it is in")
		return nil, false
	}
	var own, merged []field
	seen := map[string]*yaml.Node{}
	var mergeKey *yaml.Node // the first <<
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMergeKey(k) {
			if mergeKey != nil {
				// YAML loaders differ on which of two wins (go-yaml
				// and PyYAML take the last), so neither is guessed.
				d.errorf(k, fieldPath, "<< appears twice (first at line %d): merge several mappings with one << and a list, such as <<: [*a, *b]", mergeKey.Line)
				continue
			}
			mergeKey = k
			srcs := []*yaml.Node{resolve(v)}
			if srcs[0].Kind == yaml.SequenceNode {
				srcs = srcs[0].Content
			}
			for _, s := range srcs {
				fs, _ := d.mappingIn(s, fieldPath, "a mapping to merge (<<)", append(merging, n))
				merged = append(merged, fs...)
			}
			continue
		}
		k = resolve(k)
		if k.Kind != yaml.ScalarNode || isNull(k) {
			d.errorf(k, fieldPath, "want a name as key, not %s", describe(k))
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			d.errorf(k, fieldPath, "%q appears twice (first at line %d)", k.Value, prev.Line)
			continue
		}
		seen[k.Value] = k
		own = append(own, field{k, v})
	}
	// Keys written in the mapping win over merged ones; among merged
	// mappings, the first to give a key wins (YAML merge key spec).
	for _, kv := range merged {
		if _, dup := seen[kv.key.Value]; !dup {
			seen[kv.key.Value] = kv.key
			own = append(own, kv)
		}
	}
	return own, true
}

// spend counts n values walked, and reports false once the file has cost
// more than maxWork: a walk stops there.
func (d *decoder) spend(n int, at *yaml.Node) bool {
	d.work += n
	if d.work <= maxWork {
		return true
	}
	if !d.exhausted {
		d.exhausted = true
		d.addAlways(at, d.step, "", "through aliases (*name) and merges (<<), the file holds more than %d values", maxWork)
	}
	return false
}

// maxText bounds the bytes of the values read in the whole file, each
// alias followed counted again: no more than the file itself may hold. A
// regular expression or a status argument of a hundred kilobytes, used
// by a thousand aliases, would otherwise be compiled, or copied, a
// thousand times.
const maxText = MaxFileSize

// readText counts s, the text of a value about to be read at n, and
// reports false once the file has cost more than maxText: the value is
// then not read.
func (d *decoder) readText(s string, n *yaml.Node) bool {
	d.text += len(s)
	if d.text <= maxText {
		return true
	}
	if !d.wordy {
		d.wordy = true
		d.addAlways(n, d.step, "", "through aliases (*name) and merges (<<), the file's values hold more than %d MiB of text", maxText>>20)
	}
	return false
}

// indexField is the path of element i of the list at field.
func indexField(field string, i int) string { return fmt.Sprintf("%s[%d]", field, i) }

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	// An alias names an anchored node, never another alias, but a loop
	// bound costs nothing.
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Style == 0 && k.ShortTag() == "!!merge"
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func isString(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" }
