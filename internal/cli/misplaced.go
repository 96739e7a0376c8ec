package cli

import (
	"flag"
	"log/slog"
	"strings"
)

// ownFlags are the proxy's flags (and serve's) that, left out, silently
// change what the proxy keeps or guarantees: where records live, the
// policy, who calls, the journal, shadow mode, what it listens on and who
// may call.
var ownFlags = []string{
	"store", "policy", "scope", "actor", "lease", "journal", "journal-key", "shadow", "upstream", "upstream-header",
	"listen", "auth-token-file", "allow-origin", "allow-host",
}

// misplacedFlags returns the names of fs's own flags, of ownFlags, found
// among argv, the upstream command that args (fs's whole command line)
// gave without a "--" before it. The flag package stops at the command:
// `mcp-idempotent python3 srv.py --store sqlite:x` passes --store to the
// server, and the proxy keeps its records in memory. Not refused, since
// a server may have a flag of that name; a "--" before the command says
// so. Past a "--" among argv, the arguments are the server's own.
func misplacedFlags(fs *flag.FlagSet, args, argv []string) []string {
	if n := len(args) - len(argv); len(argv) == 0 || n > 0 && args[n-1] == "--" {
		return nil
	}
	var found []string
	for _, a := range argv[1:] {
		if a == "--" {
			break
		}
		name, ok := strings.CutPrefix(a, "-")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "-")
		name, _, _ = strings.Cut(name, "=")
		for _, own := range ownFlags {
			if name == own && fs.Lookup(own) != nil {
				found = append(found, "--"+own)
			}
		}
	}
	return found
}

// warnMisplacedFlags logs misplacedFlags, naming each flag and never its
// value, which may hold a credential (a store's password).
func warnMisplacedFlags(log *slog.Logger, fs *flag.FlagSet, args, argv []string) {
	for _, name := range misplacedFlags(fs, args, argv) {
		log.Warn("a proxy flag after the upstream command goes to the upstream, not to the proxy: "+
			"the proxy's flags go before the command (or before --); a -- before the command says the flag is the upstream's",
			"flag", name, "command", argv[0])
	}
}
