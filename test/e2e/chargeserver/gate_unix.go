//go:build unix

package main

import (
	"os"
	"syscall"
)

// gateSignal opens the gate.
var gateSignal os.Signal = syscall.SIGUSR1
