package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Where the server has Redis Functions (Redis 7.0 and later, and
// Valkey), the scripts are the functions of one library, loaded once
// (FUNCTION LOAD) and run with FCALL. A script run with EVALSHA runs the
// preamble it shares with the others (luaLib) on every call, making its
// tables and functions anew: about 30,000 of the 200,000 instructions
// the server spends on an update. A server without them (Redis 6) runs
// the same scripts with EVALSHA.
//
// The library and its functions are named for a hash of their code, so
// that builds whose scripts differ share a server, each running its
// own. A library no build runs any more stays until it is deleted
// (FUNCTION DELETE).

// A script is one of the store's Lua scripts. Its body reads KEYS and
// ARGV, as a script run with EVALSHA does.
type script struct {
	name string        // its name in the library, for its function's
	body string        // the script without the preamble
	sc   *redis.Script // the preamble (if it uses it) and the body
	fn   string        // its function's name; set with the library
}

func newScript(name string, withLib bool, body string) *script {
	src := body
	if withLib {
		src = luaLib + body
	}
	return &script{name: name, body: body, sc: redis.NewScript(src)}
}

// lib is the Lua library of every script.
var lib = newLibrary(reserveScript, updateScript, settleScript, checkScript, renewScript, allowanceScript, attachScript)

type library struct {
	name, code string
	scripts    []*script
}

// newLibrary writes the library of scripts and names their functions.
func newLibrary(scripts ...*script) library {
	h := sha256.New()
	h.Write([]byte(luaLib))
	for _, sc := range scripts {
		h.Write([]byte("\x00" + sc.name + "\x00" + sc.body))
	}
	name := "mcpi_" + hex.EncodeToString(h.Sum(nil)[:8])
	var b strings.Builder
	b.WriteString("#!lua name=" + name + "\n" + luaLib)
	for _, sc := range scripts {
		sc.fn = name + "_" + sc.name
		b.WriteString("\nredis.register_function('" + sc.fn + "', function(KEYS, ARGV)\n" + sc.body + "\nend)\n")
	}
	return library{name: name, code: b.String(), scripts: scripts}
}

// loadScripts gets the server ready to run the scripts: it loads the
// library if the server has Redis Functions and the Options allow them,
// else each script.
func (s *Store) loadScripts(ctx context.Context) error {
	if !s.evalOnly {
		err := s.loadLibrary(ctx)
		if _, answered := errors.AsType[redis.Error](err); err == nil || !answered {
			return err
		}
		// Redis 6 does not know FUNCTION; a user the server's ACL keeps
		// from it is not sure to be kept from EVAL.
	}
	for _, sc := range lib.scripts {
		if err := sc.sc.Load(ctx, s.rdb).Err(); err != nil {
			return err
		}
	}
	return nil
}

// loadLibrary loads the library, on every master of a Cluster, and runs
// the scripts as its functions from then on if the server has it.
func (s *Store) loadLibrary(ctx context.Context) error {
	err := s.eachMaster(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		err := c.FunctionLoad(ctx, lib.code).Err()
		if err != nil && !(redis.HasErrorPrefix(err, "Library") && strings.Contains(err.Error(), "already exists")) {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.functions.Store(true)
	return nil
}

// eval queues sc on p: if full, the script in full, which no server can
// have forgotten (a call sent again after it was); else a call of its
// function if the server has the library, or the script by its hash.
func (s *Store) eval(ctx context.Context, p redis.Pipeliner, sc *script, full bool, keys []string, args ...any) *redis.Cmd {
	switch {
	case full:
		return sc.sc.Eval(ctx, p, keys, args...)
	case s.functions.Load():
		return p.FCall(ctx, sc.fn, keys, args...)
	default:
		return sc.sc.EvalSha(ctx, p, keys, args...)
	}
}

// run runs sc alone, in one round trip, as pipe does.
func (s *Store) run(ctx context.Context, sc *script, keys []string, args ...any) (*redis.Cmd, error) {
	items, replicas := s.pipe(ctx, 1, func(p redis.Pipeliner, _ int, full bool) {
		s.eval(ctx, p, sc, full, keys, args...)
	})
	return items[0][0].(*redis.Cmd), replicas
}

// forgotten reports whether any of cmds failed because the server did
// not have the script or the function it called, which then did not
// run: after a restart, a SCRIPT FLUSH or a FUNCTION FLUSH, or on a
// server that was replaced by one without Redis Functions.
func forgotten(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if err := c.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT") ||
			redis.HasErrorPrefix(err, "Function not found") || c.Name() == "fcall" && redis.HasErrorPrefix(err, "unknown command")) {
			return true
		}
	}
	return false
}

// relearn gets the server ready to run the commands that forgotten
// found, sent again in full: it loads the library again, or learns that
// the server has none, or finds it has Redis Functions now (a server
// that could not be reached when the store opened).
func (s *Store) relearn(ctx context.Context) {
	if s.evalOnly {
		return
	}
	err := s.loadLibrary(ctx)
	if _, answered := errors.AsType[redis.Error](err); answered || err != nil && s.cluster == nil {
		// In a Cluster, a master out of reach says nothing of whether
		// the others have Redis Functions; the calls it does not
		// answer fail anyway.
		s.functions.Store(false)
	}
}
