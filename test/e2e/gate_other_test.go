//go:build !unix

package e2e

import "errors"

// openGate fails: a chargeserver's gate opens on SIGUSR1, which this
// system lacks (chargeserver refuses -gate here).
func openGate(pid int) error {
	return errors.New("no SIGUSR1 to open a chargeserver's gate with")
}
