package pgstore

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// shouldPing reports whether a pooled connection is pinged before use:
// pgxpool's rule (idle over a second), or one whose server has spoken
// or hung up since its last answer. A server ends a session it
// terminates (pg_terminate_backend, a restart, a pooler's) with a FATAL
// message and a close; a statement sent on it fails, and a write then
// leaves its caller unsure whether it was made. The ping finds it dead
// first, and the pool takes another connection.
func shouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool {
	if p.IdleDuration > time.Second {
		return true
	}
	c := p.Conn.PgConn().Conn()
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	return pending(c)
}
