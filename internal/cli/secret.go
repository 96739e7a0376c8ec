package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// newHasher returns the fingerprint Hasher: keyed by MCP_IDEMPOTENT_SECRET;
// else by the secret a durable store keeps, which every proxy sharing it
// agrees on; else by a random secret for this process (the memory store
// forgets everything at exit, so nothing needs the secret to outlive it).
// A store that cannot give its secret at start (it cannot be reached)
// gives a Pending Hasher, which gets it once the store answers: side
// effects fail closed meanwhile, and read-only calls, which need no
// fingerprint, pass (DESIGN section 8).
// A server that answers and refuses the URL (record.ErrStoreRefused)
// stops the start instead: no wait ends that.
func newHasher(ctx context.Context, durable durableStore, log *slog.Logger, shadow bool) (*fingerprint.Hasher, error) {
	if s, set := os.LookupEnv("MCP_IDEMPOTENT_SECRET"); set {
		if s == "" {
			// As an empty flag value: `MCP_IDEMPOTENT_SECRET=$SECRET`
			// with SECRET unset would key this proxy otherwise than
			// those it shares a store with, and every call would run
			// once in each.
			return nil, errors.New("MCP_IDEMPOTENT_SECRET is set but empty: give the secret, or unset the variable for the store's own key")
		}
		h, err := fingerprint.New([]byte(s))
		if err != nil {
			return nil, fmt.Errorf("MCP_IDEMPOTENT_SECRET: %w", err)
		}
		warnSecretSpace(log, s)
		if c, ok := durable.(interface{ Check(context.Context) error }); ok {
			// The secret needs no store: try it as a first call would.
			if err := c.Check(ctx); err != nil {
				return h, storeDown(log, err, shadow)
			}
		}
		return h, nil
	}
	if durable == nil {
		return fingerprint.NewRandom(), nil
	}
	secret, err := durable.Secret(ctx)
	if err == nil {
		return fingerprint.New(secret)
	}
	if err := storeDown(log, err, shadow); err != nil {
		return nil, err
	}
	h := fingerprint.Pending()
	go func() {
		refused := false
		for wait := time.Second; ; wait = min(2*wait, secretRetryMax) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			secret, err := durable.Secret(ctx)
			switch {
			case err != nil && ctx.Err() == nil && errors.Is(err, record.ErrStoreRefused) && !refused:
				// As at start, no wait ends this: said once, loudly.
				refused = true
				log.Error("the store's server answers now and refuses the URL: "+meanwhile(shadow)+"; fix the URL or the server", "err", err)
				continue
			case err != nil:
				if ctx.Err() == nil {
					log.Debug(stillDown(err)+meanwhile(shadow), "err", err, "next_try_in", min(2*wait, secretRetryMax))
				}
				continue
			}
			if err := h.SetSecret(secret); err != nil {
				log.Error("the store's fingerprint secret cannot be used; "+meanwhile(shadow), "err", err)
				return
			}
			if shadow {
				log.Info("the store answers: calls are recorded")
			} else {
				log.Info("the store answers: side-effecting calls run")
			}
			return
		}
	}()
	return h, nil
}

// warnSecretSpace warns when secret, MCP_IDEMPOTENT_SECRET, begins or
// ends with white space. A newline from `echo` into a file, kept by an
// env file or a Kubernetes secret, is part of the key. Trimming it would
// change the fingerprints of deployments that use it, so it is kept, and
// said: a proxy given the secret without it would match none of this
// one's calls, silently.
func warnSecretSpace(log *slog.Logger, secret string) {
	if strings.Trim(secret, " \t\r\n") != secret {
		log.Warn("MCP_IDEMPOTENT_SECRET begins or ends with white space (space, tab, CR or LF), which is part of the key: proxies given the same secret without it match none of this one's calls")
	}
}

// storeDown returns the error that stops the start when the store's
// server refuses its URL. Else the store takes no writes, or cannot be
// reached, which is said once, loudly: the proxy runs on, and nothing else shows that every
// side effect will be refused until the store answers.
func storeDown(log *slog.Logger, err error, shadow bool) error {
	if errors.Is(err, record.ErrStoreRefused) {
		return fmt.Errorf("--store: the server refuses the URL: %w", err)
	}
	if errors.Is(err, record.ErrWritesRefused) {
		// It answered: "cannot be reached" would send the operator
		// to look at the network.
		log.Error("the store's server answers and takes no writes (a replica, or a server read-only or full): "+meanwhile(shadow)+" until it takes them; read-only calls pass", "err", err)
		return nil
	}
	log.Error("the store cannot be reached: "+meanwhile(shadow)+" until it answers; read-only calls pass", "err", err)
	return nil
}

// stillDown begins the line that says a later try to read the secret
// failed with err.
func stillDown(err error) string {
	if errors.Is(err, record.ErrWritesRefused) {
		return "the store's server still takes no writes; "
	}
	return "the store still cannot be reached; "
}

// meanwhile says what becomes of side-effecting calls while the store
// cannot be reached: they fail closed, but in shadow mode, where every
// call goes upstream as it came.
func meanwhile(shadow bool) string {
	if shadow {
		return "in shadow mode side-effecting calls still go upstream, unrecorded (store_unavailable),"
	}
	return "side-effecting calls fail closed (nothing runs)"
}

// secretRetryMax bounds the wait between two tries to read the secret
// from a store that could not be reached.
const secretRetryMax = 30 * time.Second
