package cli

import (
	"database/sql"
	"strings"
	"testing"
)

// TestJSONNamesARecordThatIsNotJSON: activity show and list --json of a
// record whose result another program set to what is not JSON fail
// naming the execution and its result, not with encoding/json's error
// alone, which names neither.
func TestJSONNamesARecordThatIsNotJSON(t *testing.T) {
	store, id := unknownExecution(t)
	db, err := sql.Open("sqlite", strings.TrimPrefix(store, "sqlite:"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE records SET result = 'garbage{'"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, args := range [][]string{
		{"activity", "show", id, "--store", store, "--json"},
		{"activity", "list", "--store", store, "--json"},
	} {
		if _, _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "its result") {
			t.Errorf("%s = %v; want an error naming %s and its result", args[:2], err, id)
		}
	}
}
