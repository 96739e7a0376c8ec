//go:build race

package e2e

// raceEnabled makes TestMain build the proxy with the race detector when
// the tests run with it, so a race inside the proxy under real peers fails
// the run.
func init() { raceEnabled = true }
