//go:build !unix

package stdio

import (
	"io"
	"os"
)

// readNow reports the end: a child's stdout has no read deadline here
// (its pipe is not polled), so no read gets to it.
func readNow(*os.File, []byte) (int, error) { return 0, io.EOF }
