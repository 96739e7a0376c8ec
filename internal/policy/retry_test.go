package policy

import (
	"strings"
	"testing"
	"time"
)

func TestParseRetry(t *testing.T) {
	f, err := Parse("p.yaml", []byte(`tools:
  upload_asset:
    retry:
      max_attempts: 5
      base: 50ms
      cap: 2s
      deadline: 90s
      transient:
        - result_text: "(?i)\\b429\\b"
          safe_to_resend: true
        - structured: {path: status, in: [503, "busy"]}
      retry_after: {structured: retry_after_seconds}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := f.Resolve("upload_asset", nil).Retry
	switch {
	case r == nil:
		t.Fatal("no retry rule")
	case r.MaxAttempts != 5 || r.Base != 50*time.Millisecond || r.Cap != 2*time.Second || r.Deadline != 90*time.Second || r.RetryAfterPath != "retry_after_seconds":
		t.Errorf("retry rule %+v", r)
	case len(r.Transient) != 2 || !r.Transient[0].Text.MatchString("HTTP 429") || !r.Transient[0].SafeToResend:
		t.Errorf("first transient match %+v", r.Transient)
	case r.Transient[1].Path != "status" || strings.Join(r.Transient[1].In, ",") != `503,"busy"` || r.Transient[1].SafeToResend:
		t.Errorf("second transient match %+v", r.Transient[1])
	}
	if f.Resolve("other", nil).Retry != nil {
		t.Error("a tool without a retry rule got one")
	}
	if f, err := Parse("p.yaml", []byte("tools:\n  a:\n    retry: {max_attempts: 2}\n")); err != nil || f.Resolve("a", nil).Retry.Deadline != DefaultDeadline {
		t.Errorf("a retry rule without deadline: %v; want the default %v", err, DefaultDeadline)
	}

	for _, tt := range []struct{ yaml, want string }{
		{"tools:\n  a:\n    retry:\n      max_attempts: 0\n", "p.yaml:4:21: tools.a.retry.max_attempts: want a whole number of attempts from 1 to 20"},
		{"tools:\n  a:\n    retry:\n      transient:\n        - result_text: \"(\"\n", "p.yaml:5:24: tools.a.retry.transient[0].result_text: not a regular expression (Go RE2 syntax): error parsing regexp: missing closing )"},
		{"tools:\n  a:\n    retry:\n      transient:\n        - result_text: 429\n", "p.yaml:5:24: tools.a.retry.transient[0].result_text: want a regular expression (Go RE2 syntax) as a string, not the number 429; quote it"},
		{"tools:\n  a:\n    retry:\n      transient:\n        - safe_to_resend: true\n", "tools.a.retry.transient[0]: a transient match needs result_text or structured"},
		{"tools:\n  a:\n    retry:\n      base: 1s\n      cap: 10ms\n", "tools.a.retry: cap (10ms) is shorter than base (1s)"},
		{"tools:\n  a:\n    retry:\n      tries: 3\n", `unknown key "tries" (valid: max_attempts, base, cap, deadline, transient, retry_after, account)`},
		{"tools:\n  a:\n    retry:\n      deadline: 0s\n", `p.yaml:4:17: tools.a.retry.deadline: "0s" must be more than zero`},
		{"tools:\n  a:\n    retry:\n      deadline: soon\n", `p.yaml:4:17: tools.a.retry.deadline: "soon" is not a duration (use 90s, 10m, 72h or 7d)`},
		{"tools:\n  a:\n    retry:\n      deadline: 99999999h\n", `p.yaml:4:17: tools.a.retry.deadline: "99999999h" is too long`},
		{"tools:\n  a:\n    retry:\n      deadline: 1h1.5x\n", `p.yaml:4:17: tools.a.retry.deadline: "1h1.5x" is not a duration`},
		{"tools:\n  a:\n    retry:\n      deadline: [1s]\n", `p.yaml:4:17: tools.a.retry.deadline: a list is not a duration`},
	} {
		_, err := Parse("p.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", tt.yaml, err, tt.want)
		}
	}
}

func TestParseAlreadyDone(t *testing.T) {
	f, err := Parse("p.yaml", []byte("tools:\n  delete_file:\n    already_done: {result_text: \"(?i)not found\"}\n  delete_user:\n    already_done:\n      - result_text: gone\n      - structured: {path: code, in: [404]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m := f.Resolve("delete_file", nil).AlreadyDone; len(m) != 1 || !m[0].Text.MatchString("Not Found") {
		t.Errorf("delete_file already_done = %+v", m)
	}
	if m := f.Resolve("delete_user", nil).AlreadyDone; len(m) != 2 || m[1].Path != "code" {
		t.Errorf("delete_user already_done = %+v", m)
	}
	if _, err := Parse("p.yaml", []byte("tools:\n  a:\n    already_done: {}\n")); err == nil || !strings.Contains(err.Error(), "needs result_text or structured") {
		t.Errorf("an empty already_done: %v", err)
	}
}

func TestParseAccounts(t *testing.T) {
	f, err := Parse("p.yaml", []byte(`accounts:
  cloudinary: {rate: 500/h, burst: 20, max_concurrency: 4, retry_budget: {max_tokens: 20, token_ratio: 0.2}}
  slack: {rate: 1/s}
tools:
  upload_asset:
    retry: {account: cloudinary}
`))
	if err != nil {
		t.Fatal(err)
	}
	a := f.Accounts()
	if c := a["cloudinary"]; c.Rate != 500.0/3600 || c.Burst != 20 || c.MaxConcurrency != 4 || c.MaxTokens != 20 || c.TokenRatio != 0.2 {
		t.Errorf("cloudinary = %+v", c)
	}
	if s := a["slack"]; s.Rate != 1 || s.Burst != 1 || s.MaxTokens != 10 || s.TokenRatio != 0.1 {
		t.Errorf("slack = %+v; want the defaults burst 1, max_tokens 10, token_ratio 0.1", s)
	}
	if r := f.Resolve("upload_asset", nil).Retry; r == nil || r.Account != "cloudinary" {
		t.Errorf("upload_asset retry = %+v", r)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"accounts:\n  a: {rate: 5 per hour}\n", `accounts.a.rate: "5 per hour" is not a rate such as 500/h`},
		// Numbers the float parser takes that are no allowance: refused
		// here, not a panic when the proxy starts.
		{"accounts:\n  a: {rate: NaN/s}\n", `accounts.a.rate: "NaN/s" is not a rate such as 500/h`},
		{"accounts:\n  a: {rate: +Inf/d}\n", `accounts.a.rate: "+Inf/d" is not a rate such as 500/h`},
		{"accounts:\n  a: {rate: 5e-324/d}\n", `too low`},
		{"accounts:\n  a: {rate: 1e-10/s}\n", `too low (less than one call in 292 years)`},
		{"accounts:\n  a: {burst: 3}\n", "accounts.a: an account needs a rate"},
		{"accounts:\n  a: {rate: 1/s, retry_budget: {token_ratio: 5000}}\n", `accounts.a.retry_budget.token_ratio: "5000": want a number more than 0 and at most 1000`},
		{"accounts:\n  a: {rate: 1/s, retry_budget: {max_token: abc}}\n", `accounts.a.retry_budget: unknown key "max_token" (valid: max_tokens, token_ratio)`},
		{"accounts:\n  a: {rate: [5/s]}\n", `accounts.a.rate: want a rate such as 500/h, 10/s, 3/m or 1000/d, not a list`},
		{"accounts:\n  a: {rate: ~}\n", `accounts.a.rate: want a rate such as 500/h, 10/s, 3/m or 1000/d, not an empty value`},
		{"accounts:\n  a: {rate: 1/s, burst: [2], max_concurrency: {x: 1}}\n", `accounts.a.burst: a list: want a whole number from 1 to 1000000`},
		{"accounts:\n  a: {rate: 1/s, max_concurrency: {x: 1}}\n", `accounts.a.max_concurrency: a mapping: want a whole number from 0 to 1000000`},
		{"accounts:\n  a: {rate: 1/s, burst: 0}\n", "accounts.a.burst: \"0\": want a whole number from 1 to 1000000"},
		{"tools:\n  t:\n    retry: {account: nope}\n", `p.yaml:3:22: tools.t.retry.account: "nope" is not an account defined under accounts`},
	} {
		if _, err := Parse("p.yaml", []byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", tt.yaml, err, tt.want)
		}
	}
}

// TestAccountNumbersMessages: a bad number of an account is named with the
// range it must be in, and a rate given but wrong is one error, not two.
func TestAccountNumbersMessages(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"accounts:\n  a: {rate: 1/s, max_concurrency: -1}\n", `accounts.a.max_concurrency: "-1": want a whole number from 0 to 1000000`},
		{"accounts:\n  a: {rate: 1/s, burst: 99999999999999999999}\n", `accounts.a.burst: "99999999999999999999": want a whole number from 1 to 1000000`},
		// The stores keep when a burst is full again in unix nanoseconds,
		// which end in 2262.
		{"accounts:\n  a: {rate: 0.1/d, burst: 10000}\n", `accounts.a.burst: a burst of 10000 at 0.1/d takes over 273 years to fill again; at most 100`},
		// Just past the limit, not rounded to it.
		{"accounts:\n  a: {rate: 1/d, burst: 36600}\n", `accounts.a.burst: a burst of 36600 at 1/d takes over 100 years to fill again; at most 100`},
		{"accounts:\n  a: {rate: 1/d, burst: 36865}\n", `accounts.a.burst: a burst of 36865 at 1/d takes 101 years to fill again; at most 100`},
		{"accounts:\n  a: {rate: 0.00002/d}\n", `accounts.a.rate: a burst of 1 at 0.00002/d takes over 136 years to fill again; at most 100`},
		// A tool whose name holds a dot is named quoted, as everywhere.
		{"tools:\n  a.b:\n    retry:\n      account: nope\n", `tools."a.b".retry.account: "nope" is not an account defined under accounts`},
	} {
		if _, err := Parse("p.yaml", []byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", tt.yaml, err, tt.want)
		}
	}
	_, err := Parse("p.yaml", []byte("accounts:\n  a: {rate: 0/s}\n"))
	if err == nil || strings.Contains(err.Error(), "needs a rate") || !strings.Contains(err.Error(), `"0/s" is not a rate`) {
		t.Errorf("Parse of rate 0/s = %v; want only that it is not a rate", err)
	}
	// A tool naming an account written wrong is not told the account is
	// undefined: the one error is the account's own.
	for _, acct := range []string{"{rate: 0/s}", "{rate: 1/s, burst: 0}", "{burst: 3}", "{rate: 0.1/d, burst: 10000}"} {
		_, err := Parse("p.yaml", []byte("accounts:\n  a: "+acct+"\ntools:\n  t:\n    retry: {account: a}\n"))
		if err == nil || strings.Contains(err.Error(), "not an account defined") {
			t.Errorf("Parse with account %s = %v; want the account's error alone", acct, err)
		}
	}
}
