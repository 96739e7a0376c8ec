package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// minorFaults returns the minor page faults process pid has taken so
// far, from /proc (Linux), or -1 where it cannot be read. A fault that
// maps a page the process touches for the first time costs a few
// microseconds on a virtual machine, a noticeable part of a call's round
// trip: a chain's faults a call say how much of its p50 is that.
func minorFaults(pid int) int64 {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted from after its closing parenthesis.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return -1
	}
	fields := bytes.Fields(stat[i+1:])
	// minflt is field 10 of proc(5); the fields here start at field 3.
	if len(fields) < 8 {
		return -1
	}
	n, err := strconv.ParseInt(string(fields[7]), 10, 64)
	if err != nil {
		return -1
	}
	return n
}
