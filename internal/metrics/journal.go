package metrics

import (
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
)

// CountJournal returns j with every failed Record counted in
// mcp_idempotent_journal_errors_total. The interceptor only logs a
// journal it cannot write, so that the call goes on; the count is what an
// alert watches.
func (m *Metrics) CountJournal(j intercept.Journal) intercept.Journal {
	return countedJournal{j: j, m: m}
}

type countedJournal struct {
	j intercept.Journal
	m *Metrics
}

func (c countedJournal) Record(e journal.Entry) error {
	err := c.j.Record(e)
	if err != nil {
		c.m.journalErrs.Inc()
	}
	return err
}
