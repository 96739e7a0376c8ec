//go:build !unix

package main

import "os"

// gateSignal is nil: this system has no SIGUSR1 to open the gate with.
var gateSignal os.Signal
