package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/proxy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/streamhttp"
)

// session runs one client session: it starts the upstream (a child
// process, or a session with the HTTP server), pumps frames between it
// and client until the client goes, and stops the upstream.
func (w *wiring) session(ctx context.Context, client proxy.Conn, actor, scope string, who clientEnd) error {
	f, log := w.f, w.log
	var (
		u          = &sessionUpstream{w: w, ctx: ctx}
		upstream   proxy.Conn
		upstreamID string
		// name is what records show of a command (its arguments may
		// hold a credential, --api-key ...: intercept.Request has them
		// as a keyed hash).
		name string
	)
	if f.upstream != "" {
		c, id, err := dialUpstream(ctx, f.upstream, f.headers, w.hasher, log, w.maxMessage)
		if err != nil {
			return err
		}
		defer func() { u.http.Close() }()
		u.http, upstream, upstreamID, u.shown = c, c, id, id
	} else {
		child, err := stdio.Start(w.argv, w.stderr, w.maxMessage)
		if err != nil {
			return err
		}
		u.child, upstream, upstreamID = child, child, stdio.Identity(w.dir, w.argv)
		name = stdio.Name(w.dir, w.argv)
		u.shown = name
		log.Debug("upstream started", "upstream", u.shown, "pid", child.Pid())
	}

	opts := proxy.Options{
		Instance:      w.instance,
		Interceptor:   w.in,
		Actor:         actor,
		Scope:         scope,
		UpstreamID:    upstreamID,
		UpstreamName:  name,
		Resolve:       w.resolve,
		Logger:        log,
		MaxRestarts:   f.restarts,
		RestartWindow: f.window,
		Tracer:        w.tracer,
		Client:        &who.client,
		EndReason:     who.endReason,
		ToolWarnings:  w.toolWarnings,
	}
	switch {
	case f.restarts > 0 && u.http != nil:
		opts.Restart = u.redial
	case f.restarts > 0 && u.child != nil:
		opts.Restart = u.startAgain
	}
	runErr := proxy.New(client, upstream, opts).Run(ctx)
	if u.child == nil {
		return runErr
	}
	return stopped(ctx, u.child, u.exited, u.shown, runErr)
}

// A sessionUpstream is the upstream of one client session as it is
// started again: a child process, or a session with the HTTP server.
type sessionUpstream struct {
	w     *wiring
	ctx   context.Context    // the client session's
	shown string             // what logs show of the upstream
	child *stdio.Child       // the upstream, when it is a command
	http  *streamhttp.Client // the upstream, when it is a URL
	// exited is the upstream that exited last, which child replaced:
	// a restart that fails names how it ended, not how child did.
	exited *stdio.Child
}

// redial opens a new session with the HTTP server, the last having
// expired (404); the proxy replays the client's handshake into it.
func (u *sessionUpstream) redial(ctx context.Context) (proxy.Conn, error) {
	u.http.Close()
	c, _, err := dialUpstream(ctx, u.w.f.upstream, u.w.f.headers, u.w.hasher, u.w.log, u.w.maxMessage)
	if err != nil {
		return nil, err
	}
	u.http = c
	return c, nil
}

// startAgain starts the command again, its process having exited.
func (u *sessionUpstream) startAgain(context.Context) (proxy.Conn, error) {
	stopChild(u.ctx, u.child) // reap the one that exited
	u.exited = u.child
	next, err := stdio.Start(u.w.argv, u.w.stderr, u.w.maxMessage)
	if err != nil {
		return nil, err
	}
	u.child = next
	u.w.log.Debug("upstream started again", "upstream", u.shown, "pid", next.Pid())
	return next, nil
}

// stopped stops child, the upstream a session ran with until Run returned
// runErr, and returns the session's error: why the upstream exited, if it
// did while the client was connected. exited is the upstream that exited
// before child was started in its place, or nil.
func stopped(ctx context.Context, child, exited *stdio.Child, shown string, runErr error) error {
	if errors.Is(runErr, proxy.ErrUpstreamClosed) {
		// Give the exit status a moment to arrive so the message names it.
		select {
		case <-child.Done():
		case <-time.After(2 * time.Second):
		}
		stopChild(ctx, child)
		if errors.Is(runErr, proxy.ErrCrashLoop) {
			return fmt.Errorf("%v; the last exit: %v. Calls in flight were answered as outcome unknown or failed", runErr, exitStatus(child))
		}
		why, status := "", exitStatus(child)
		if re, ok := errors.AsType[*proxy.RestartError](runErr); ok {
			why = "; " + re.Error()
			if exited != nil {
				// child is the one started again, refused, and
				// stopped by the proxy: its end says nothing.
				status = exitStatus(exited)
			}
		}
		return fmt.Errorf("the upstream %s exited while the client was connected (%v)%s; calls in flight were answered as outcome unknown or failed", shown, status, why)
	}
	stopChild(ctx, child)
	return runErr
}

// stopChild stops the upstream (stdio.Child.Stop) with 2 s between its
// steps, cut short once the proxy is told to stop (ctx is done: SIGTERM,
// SIGINT), even in the middle of a step: whoever sent the signal gives up
// waiting and kills the proxy soon after, and the upstream must be
// stopped before that.
func stopChild(ctx context.Context, child *stdio.Child) {
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = child.Stop(stop, 2*time.Second, ctx.Done())
}

func exitStatus(child *stdio.Child) string {
	select {
	case <-child.Done():
		if err := child.ExitError(); err != nil {
			return err.Error()
		}
		return "exit status 0"
	default:
		return "still running; stopped"
	}
}
