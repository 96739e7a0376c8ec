package cli

import (
	"os"
	"os/signal"
	"syscall"
)

// hurryOnSignal calls hurry on the next SIGTERM, SIGINT or SIGHUP, and
// returns a function that stops listening. serve waits for calls under
// way when told to stop, as a stdio proxy waits when its client leaves; a
// second signal is the operator saying not to wait. A signal the process
// was started ignoring (nohup, a shell's background job) stays ignored,
// as main leaves it.
func hurryOnSignal(hurry func()) (stop func()) {
	var sigs []os.Signal
	for _, sig := range []os.Signal{syscall.SIGTERM, os.Interrupt, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			sigs = append(sigs, sig)
		}
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, sigs...)
	done := make(chan struct{})
	go func() {
		select {
		case <-c:
			hurry()
		case <-done:
		}
	}()
	return func() {
		signal.Stop(c)
		close(done)
	}
}
