package intercept

import (
	"errors"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// writeThenTell is a caller over a transport that writes in order and
// tells of the write once it is done (stdio.Conn): the client may act on
// the answer before written(nil) is called, and hook runs then.
type writeThenTell struct {
	*answers
	hook func()
}

func (r *writeThenTell) DeliversLater() bool { return true }

func (r *writeThenTell) WritesInOrder() bool { return true }

func (r *writeThenTell) ReplyThen(a Answer, written func(error)) error {
	err := r.answers.Reply(a)
	if r.hook != nil {
		r.hook()
		r.hook = nil
	}
	if err == nil {
		written(nil)
	}
	return err
}

// failingAtOnce is a caller whose transport's write fails at once:
// ReplyThen returns the error and never calls written.
type failingAtOnce struct{ *answers }

func (failingAtOnce) DeliversLater() bool { return true }

func (failingAtOnce) ReplyThen(Answer, func(error)) error { return errBrokenPipe }

var errBrokenPipe = errors.New("write |1: broken pipe")

// TestApprovalQuestionAgainNotWrittenJournaled: a caller asked the
// approval's question again, whose write fails at once, still has its
// journal line, as over Reply.
func TestApprovalQuestionAgainNotWrittenJournaled(t *testing.T) {
	j := &memJournal{}
	h := approving(policy.ApprovalEach, policy.ApproverClient).withJournal(j, nil)
	args := `{"card":"4242","amount":100}`
	req, a := h.request(t, roundCall(args, nil, ""))
	req.Reply = &laterAnswers{answers: a, written: make(chan func(error), 1)}
	h.in.Handle(t.Context(), req)
	asRound(t, a.only(t))
	again, _ := h.request(t, roundCall(args, nil, ""))
	again.Reply = failingAtOnce{newAnswers()}
	h.in.Handle(t.Context(), again)
	h.settle(t)
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.entries {
		if e.Attach != nil {
			return
		}
	}
	t.Errorf("no line for the caller asked again whose question's write failed")
}
