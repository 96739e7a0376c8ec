package intercept

import (
	"encoding/json"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
)

// upstreamShown returns what records, logs and answers show of req's
// upstream: its name and a keyed hash of its identity, which tells two
// upstreams apart (two commands' arguments, two credentials) without
// showing what may be a secret (DESIGN section 3). The hash is keyed by
// the fingerprint secret, so it is no guessable digest of a token.
func (in *Interceptor) upstreamShown(req *Request) string {
	// Small enough to be inlined: an unnamed upstream is shown as it is.
	if req.Origin.UpstreamName == "" {
		return req.Origin.UpstreamID
	}
	return in.namedUpstream(req)
}

// namedUpstream is upstreamShown for an upstream with a name.
func (in *Interceptor) namedUpstream(req *Request) string {
	if s, ok := in.shown.Load(req.Origin.UpstreamID); ok {
		return s.(string)
	}
	id, _ := json.Marshal(req.Origin.UpstreamID)
	ref, err := in.hasher.Sum(fingerprint.Action{Tool: "upstream identity", Extra: map[string]json.RawMessage{"identity": id}})
	if err != nil {
		// Not cached: the secret, known to the fingerprint just taken,
		// is never lost, but an error must not name the upstream.
		return req.Origin.UpstreamName
	}
	shown := req.Origin.UpstreamName + " ref:" + ref[:16]
	in.shown.Store(req.Origin.UpstreamID, shown)
	return shown
}
