package intercept

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// shapeArguments applies a tool's fingerprint options to its arguments
// before they are fingerprinted: the inputSchema's defaults are filled in
// for members the call leaves out (policy Defaults), and the members the
// policy ignores are dropped. The call sent upstream is never changed.
// Arguments come back as they were when neither option applies, which is
// the common case and costs nothing. schema's twins are declared
// properties, which a server reads apart (noCaseTwin).
func shapeArguments(args json.RawMessage, pol *policy.Policy, schema *Schema) (json.RawMessage, error) {
	var defaults map[string]json.RawMessage
	var twins *mcp.CaseTwins
	if schema != nil {
		defaults, twins = schema.Defaults, schema.Twins
	}
	useDefaults := pol.Defaults && len(defaults) > 0
	if !useDefaults && len(pol.Ignore) == 0 {
		return args, nil
	}
	obj := map[string]json.RawMessage{}
	if args != nil {
		if err := fingerprint.CheckValue(args); err != nil {
			return nil, &fingerprint.MemberError{Member: "arguments", Err: err}
		}
		if err := json.Unmarshal(args, &obj); err != nil {
			return nil, fmt.Errorf("reading arguments: %w", err)
		}
	}
	if useDefaults {
		for name, v := range defaults {
			if err := noCaseTwin(obj, name, twins); err != nil {
				return nil, err
			}
			if _, ok := obj[name]; !ok {
				obj[name] = v
			}
		}
	}
	for _, path := range pol.Ignore {
		if err := dropPath(obj, strings.Split(path, "."), twins); err != nil {
			return nil, err
		}
	}
	return json.Marshal(obj)
}

// dropPath deletes the member at path from obj, and an object the removal
// leaves empty. A path through a value that is not an object, or to a
// member that is absent, drops nothing. twins are those declared at obj's
// level.
func dropPath(obj map[string]json.RawMessage, path []string, twins *mcp.CaseTwins) error {
	if err := noCaseTwin(obj, path[0], twins); err != nil {
		return err
	}
	if len(path) == 1 {
		delete(obj, path[0])
		return nil
	}
	raw, ok := obj[path[0]]
	if !ok || len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	inner := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw, &inner); err != nil {
		return fmt.Errorf("reading arguments: %w", err)
	}
	if err := dropPath(inner, path[1:], twins.Under(path[0])); err != nil {
		return err
	}
	if len(inner) == 0 {
		// Left empty by the removal: {"trace":{"id":"t"}} and {} are the
		// same call when trace.id is ignored.
		delete(obj, path[0])
		return nil
	}
	b, err := json.Marshal(inner)
	if err != nil {
		return err
	}
	obj[path[0]] = b
	return nil
}

// noCaseTwin refuses arguments holding a member that differs from name,
// which the policy names, only in case. The policy would drop or fill in
// name and leave the twin, while a server that matches names without
// regard to case (Go's encoding/json) reads the twin as name: two calls
// whose twins differ would be taken for one (DESIGN section 10). A twin
// is no fault when the schema declares both it and name: a server reads
// them apart (encoding/json prefers the exact name), and the fingerprint
// keeps the twin as the member it is.
func noCaseTwin(obj map[string]json.RawMessage, name string, twins *mcp.CaseTwins) error {
	for k := range obj {
		if k != name && strings.EqualFold(k, name) && !twins.Declared(k, name) {
			return fmt.Errorf("arguments member %q differs from %q, which the tool's policy names, only in case; a server that matches names without regard to case reads it as %q", k, name, name)
		}
	}
	return nil
}
