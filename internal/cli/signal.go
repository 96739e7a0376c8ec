package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// StopContext returns a context that a SIGTERM, SIGINT or SIGHUP ends,
// as signal.NotifyContext does, and whose cause names the signal for
// hurryOnSignal. A signal the process was started ignoring (nohup, a
// shell's background job) stays ignored: Notify would undo that. Later
// signals do not stop the process until stop is called.
func StopContext(parent context.Context) (ctx context.Context, stop func()) {
	sigs := []os.Signal{syscall.SIGTERM}
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			sigs = append(sigs, sig)
		}
	}
	ctx, cancel := context.WithCancelCause(parent)
	c := make(chan os.Signal, 1)
	signal.Notify(c, sigs...)
	go func() {
		select {
		case sig := <-c:
			cancel(stopSignal{sig})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel(nil)
		signal.Stop(c)
	}
}

// A stopSignal is the cause of a StopContext ended by a signal.
type stopSignal struct{ os.Signal }

func (s stopSignal) Error() string { return s.Signal.String() + " signal received" }

// Is makes a stopSignal a context.Canceled, as signal.NotifyContext's
// cause is.
func (s stopSignal) Is(target error) bool { return target == context.Canceled }

// sameKeypress is how soon after the signal that stopped the process the
// same signal is taken for that one again, not a second: one Ctrl-C in a
// terminal reaches the whole process group, and a launcher in it that
// forwards signals to its child (npx's) sends it a second copy, about a
// millisecond later.
const sameKeypress = 250 * time.Millisecond

// secondSignal reports whether sig, received after since of waiting, is
// a second signal to stop, and not the one that ended ctx, first, again.
func secondSignal(first, sig os.Signal, since time.Duration) bool {
	return sig != first || since >= sameKeypress
}

// hurryOnSignal calls hurry on the next SIGTERM, SIGINT or SIGHUP, and
// returns a function that stops listening. serve waits for calls under
// way when told to stop, as a stdio proxy waits when its client leaves; a
// second signal is the operator saying not to wait. ctx is the context
// the first ended (StopContext): a copy of that signal within
// sameKeypress is not a second. A signal the process was started
// ignoring stays ignored, as StopContext leaves it.
func hurryOnSignal(ctx context.Context, hurry func()) (stop func()) {
	var first os.Signal
	var s stopSignal
	if errors.As(context.Cause(ctx), &s) {
		first = s.Signal
	}
	var sigs []os.Signal
	for _, sig := range []os.Signal{syscall.SIGTERM, os.Interrupt, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			sigs = append(sigs, sig)
		}
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, sigs...)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		for {
			select {
			case sig := <-c:
				if secondSignal(first, sig, time.Since(start)) {
					hurry()
					return
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(c)
		close(done)
	}
}
