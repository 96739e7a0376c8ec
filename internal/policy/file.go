package policy

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxRetention is the longest retention a policy file may set.
const MaxRetention = 400 * 24 * time.Hour

// A File is a parsed policy file: the user's written replay contract,
// layered over the defaults that tool annotations give. It does not change
// once parsed, so it is safe for concurrent use.
type File struct {
	path     string
	defaults rule
	rules    []*rule          // tool rules, exact names and globs, in file order
	exact    map[string]*rule // rules of exact tool names
	accounts map[string]Account
}

// MaxFileSize is the largest policy file Load reads, far above any real
// one: a path such as /dev/zero must not fill the memory.
const MaxFileSize = 4 << 20

// Load reads and parses the policy file at path. It returns when ctx ends
// even if the read does not: a FIFO with no writer, or a terminal, can
// block it for good, and a signal must still stop the process. The read
// is then left to end with the process.
func Load(ctx context.Context, path string) (*File, error) {
	type read struct {
		data []byte
		err  error
	}
	done := make(chan read, 1)
	go func() {
		data, err := readFile(path)
		done <- read{data, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("reading policy file: %w", r.err)
		}
		return Parse(path, r.data)
	case <-ctx.Done():
		return nil, fmt.Errorf("reading policy file %s: stopped: %w", path, context.Cause(ctx))
	}
}

// readFile reads the file at path, refusing one over MaxFileSize.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d MiB, the most a policy file may hold", path, MaxFileSize>>20)
	}
	return data, nil
}

// Parse parses a policy file's contents; name is used in errors (the path).
// An empty file is valid: every tool keeps its annotation defaults. Every
// problem found is reported, joined with errors.Join, each as
// "name:line:column: field.path: what is wrong"; past maxErrors, a last
// error counts the rest. A file with any problem is refused as a whole.
//
// The file is read in two steps: decoded into specs, each value checked
// on its own (decode.go), then validated into rules, the values checked
// together (validate.go).
func Parse(name string, data []byte) (*File, error) {
	root, err := document(name, data)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return &File{path: name, exact: map[string]*rule{}}, nil
	}
	p := &problems{name: name}
	checkTags(p, root)
	spec := (&decoder{problems: p}).file(root)
	f := (&validator{p}).file(spec)
	if len(p.errs) > 0 {
		// In file order, then in the order of the walk (see place): the
		// decoder finds a duplicate key before the errors in the first of
		// its two values.
		slices.SortStableFunc(p.errs, func(a, b error) int {
			ea, eb := a.(*fileError), b.(*fileError)
			return cmp.Or(cmp.Compare(ea.line, eb.line), cmp.Compare(ea.column, eb.column), cmp.Compare(ea.step, eb.step))
		})
		if more := p.found - min(p.found, maxErrors); more > 0 {
			p.errs = append(p.errs, fmt.Errorf("%s: and %d more errors, not shown", name, more))
		}
		return nil, errors.Join(p.errs...)
	}
	return f, nil
}

// document returns the root node of the file's one YAML document: nil if
// the file holds none, or an empty one.
func document(name string, data []byte) (*yaml.Node, error) {
	if err := textError(name, data); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return nil, nil
	case err != nil:
		return nil, syntaxError(name, data, err)
	}
	for {
		// A stray "---" at the end starts an empty document: allow it.
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, syntaxError(name, data, err)
		}
		if len(extra.Content) > 0 && !isNull(extra.Content[0]) {
			return nil, fmt.Errorf("%s:%d: a policy file holds one YAML document; remove the second (from this ---)", name, extra.Line)
		}
	}
	if doc.Kind != yaml.DocumentNode {
		return &doc, nil
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// Path returns the name the file was parsed under: its path for Load.
func (f *File) Path() string {
	if f == nil {
		return ""
	}
	return f.path
}

// Rules returns the exact tool names and glob patterns of the file, in file
// order, so `policy show` can list tools the file names but the upstream
// does not.
func (f *File) Rules() []string {
	if f == nil {
		return nil
	}
	names := make([]string, len(f.rules))
	for i, r := range f.rules {
		names[i] = r.name
	}
	return names
}

// RuleOf returns the name or pattern of the rule that governs tool, or ""
// if none does.
func (f *File) RuleOf(tool string) string {
	if f == nil {
		return ""
	}
	if r, _ := f.lookup(tool); r != nil {
		return r.name
	}
	return ""
}

// OperatorApproved returns the tool names and patterns whose rules ask
// an operator for approval, which needs a store the operator reaches.
func (f *File) OperatorApproved() []string {
	if f == nil {
		return nil
	}
	var names []string
	for _, r := range f.rules {
		approver := r.approver
		if approver == "" {
			approver = f.defaults.approver
		}
		if (r.approval == ApprovalEach || r.approval == ApprovalSession) && approver == ApproverOperator {
			names = append(names, r.name)
		}
	}
	return names
}

// KeyScopedApprovals returns the tool names and patterns whose rules ask
// for approval and take their scope from scope, the proxy's default,
// when that is key: a call without a client key then runs unrecorded,
// where no approval could be kept. Parse refuses such a rule when the
// file itself gives it scope key.
func (f *File) KeyScopedApprovals(scope Scope) []string {
	if f == nil || scope != ScopeKey || f.defaults.scope != "" {
		return nil
	}
	var names []string
	for _, r := range f.rules {
		if (r.approval == ApprovalEach || r.approval == ApprovalSession) && r.scope == "" {
			names = append(names, r.name)
		}
	}
	return names
}

// Accounts returns the accounts the file defines, by name.
func (f *File) Accounts() map[string]Account {
	if f == nil {
		return nil
	}
	out := make(map[string]Account, len(f.accounts))
	for k, v := range f.accounts {
		out[k] = v
	}
	return out
}
