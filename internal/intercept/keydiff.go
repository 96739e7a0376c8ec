package intercept

import (
	"encoding/json"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// taskMode is how a call stands to tasks, as its fingerprint sees it.
type taskMode int

const (
	noTask        taskMode = iota
	taskParam              // 2025-11-25: params.task
	taskExtension          // 2026-07-28: the tasks extension in _meta
)

// taskModeText says what a call in mode m asks for.
var taskModeText = [...]string{
	noTask:        "asks for no task",
	taskParam:     "asks for a task (params.task)",
	taskExtension: "declares the tasks extension",
}

// keyDifference says how a call reusing a client key differs from rec,
// the key's first: another tool, the same arguments asking otherwise for
// a task, or other arguments. A client told "the arguments differ" of
// the same arguments would look for a difference that is not there.
func (in *Interceptor) keyDifference(rec *record.Record, req *Request, args json.RawMessage) string {
	if rec.Tool != req.Call.Name {
		return "it names another tool"
	}
	c := *req.Call
	was := noTask
	switch {
	case c.Task() != nil:
		was = taskParam
	case c.TasksExtension:
		was = taskExtension
	}
	actor, scope := matchScope(req)
	for m := noTask; m <= taskExtension; m++ {
		if m == was {
			continue
		}
		var task json.RawMessage
		if m == taskParam {
			task = json.RawMessage("{}")
		}
		c.SetTask(task) // c's own: req.Call keeps its task
		c.TasksExtension = m == taskExtension
		fp, err := in.hasher.Sum(fingerprint.Action{Actor: actor, Scope: scope, Upstream: req.Origin.UpstreamID,
			Tool: c.Name, Arguments: args, Extra: extra(&c)})
		if err == nil && fp == rec.Fingerprint {
			return "the arguments are the same, but the first call " + taskModeText[m] + " and this one " + taskModeText[was]
		}
	}
	return "the arguments differ"
}
