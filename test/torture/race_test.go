//go:build unix && race

package torture

// raceEnabled makes TestMain build the proxy with the race detector when
// the tests run with it, so a race inside the proxy fails the run.
func init() { raceEnabled = true }
