package stdio

import (
	"testing"
	"unicode/utf8"
)

// TestIdentity: the same command run in two directories is two upstreams
// (a relative path names another file in each), and in one directory one.
func TestIdentity(t *testing.T) {
	argv := []string{"node", "index.js"}
	a, b := Identity("/home/u/shop", argv), Identity("/home/u/bank", argv)
	if a == b {
		t.Fatalf("Identity in two directories = %s for both", a)
	}
	if a != Identity("/home/u/shop", []string{"node", "index.js"}) {
		t.Fatal("Identity differs for the same command in the same directory")
	}
	if want := "stdio:node index.js (in /home/u/shop)"; a != want {
		t.Errorf("Identity = %s, want %s", a, want)
	}
	if got, want := Name("/home/u/shop", []string{"node", "server.js", "--api-key", "sk_live_51Hx"}), "stdio:node (in /home/u/shop)"; got != want {
		t.Errorf("Name = %s, want %s: the program and the directory, no argument", got, want)
	}
}

// TestIdentityNotUTF8: an identity is UTF-8 text even when an argument
// or the directory is not: the fingerprint takes it as JSON, where each
// byte that is not UTF-8 would become U+FFFD, and two upstreams that
// differ only in such bytes would share executions.
func TestIdentityNotUTF8(t *testing.T) {
	ids := []string{
		Identity("/srv", []string{"server", "\xff"}),
		Identity("/srv", []string{"server", "\xfe"}),
		Identity("/srv", []string{"server", "\uFFFD"}),
		Identity("/srv\xff", []string{"server"}),
		Identity("/srv\xfe", []string{"server"}),
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if !utf8.ValidString(id) {
			t.Errorf("Identity = %q, not UTF-8", id)
		}
		if seen[id] {
			t.Errorf("Identity %q given twice", id)
		}
		seen[id] = true
	}
	if got, want := ids[0], `stdio:server "\xff" (in /srv)`; got != want {
		t.Errorf("Identity = %s, want %s", got, want)
	}
}
