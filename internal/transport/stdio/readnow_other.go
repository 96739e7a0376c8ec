//go:build !unix

package stdio

import (
	"io"
	"os"
)

// readsNow is false where a pipe's read cannot be woken (its deadline
// set): a child's stdout then ends only when every holder closes it.
const readsNow = false

func readNow(*os.File, []byte) (int, error) { return 0, io.EOF }
