package intercept

import (
	"errors"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// writeThenTell is a caller over a transport that writes in order and
// tells of the write once it is done (stdio.Conn): the client may act on
// the answer before written(true) is called, and hook runs then.
type writeThenTell struct {
	*answers
	hook func()
}

func (r *writeThenTell) DeliversLater() bool { return true }

func (r *writeThenTell) WritesInOrder() bool { return true }

func (r *writeThenTell) ReplyThen(a Answer, written func(bool)) error {
	err := r.answers.Reply(a)
	if r.hook != nil {
		r.hook()
		r.hook = nil
	}
	if err == nil {
		written(true)
	}
	return err
}

// TestApprovalRetryRacesTheQuestionInOrder is
// TestApprovalRetryRacesTheQuestion over a transport that tells of the
// write once it is done: the user is still asked once.
func TestApprovalRetryRacesTheQuestionInOrder(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	args := `{"card":"4242","amount":100}`
	var retry *answers
	req, a := h.request(t, roundCall(args, nil, ""))
	req.Reply = &writeThenTell{answers: a, hook: func() { retry = h.call(t.Context(), t, roundCall(args, nil, "")) }}
	h.in.Handle(t.Context(), req)
	round := asRound(t, a.only(t))
	view(t, h.call(t.Context(), t, roundCall(args, round, "accept")).only(t))
	if ans := retry.only(t); ans.Error != nil || strings.Contains(string(ans.Result), "input_required") {
		t.Fatalf("the retry sent as the question arrived got %s %s; want the charge, not the question again", ans.Result, ans.Error)
	}
}

// failingAtOnce is a caller whose transport's write fails at once:
// ReplyThen returns the error and never calls written.
type failingAtOnce struct{ *answers }

func (failingAtOnce) DeliversLater() bool { return true }

func (failingAtOnce) ReplyThen(Answer, func(bool)) error { return errBrokenPipe }

var errBrokenPipe = errors.New("write |1: broken pipe")

// TestApprovalQuestionAgainNotWrittenJournaled: a caller asked the
// approval's question again, whose write fails at once, still has its
// journal line, as over Reply.
func TestApprovalQuestionAgainNotWrittenJournaled(t *testing.T) {
	j := &memJournal{}
	h := approving(policy.ApprovalEach, policy.ApproverClient).withJournal(j, nil)
	args := `{"card":"4242","amount":100}`
	req, a := h.request(t, roundCall(args, nil, ""))
	req.Reply = &laterAnswers{answers: a, written: make(chan func(bool), 1)}
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
