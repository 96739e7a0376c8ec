package cli

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"
)

// TestTextFilesTakeAByteOrderMark: every text file a flag names reads
// the same with a leading UTF-8 byte order mark as without; one in UTF-16
// is refused, naming the file and the mark.
func TestTextFilesTakeAByteOrderMark(t *testing.T) {
	dir := t.TempDir()
	signer, verifier := keygen(t, dir, "proxy1")
	path := filepath.Join(dir, "j")
	writeSignedJournal(t, path, signer, 0, 3, 1000) // 3 lines, C4
	checkpoint, _, err := run(t, "audit", "checkpoint", path)
	if err != nil {
		t.Fatal(err)
	}
	journalLines, _ := os.ReadFile(path)
	signerKey, _ := os.ReadFile(signer)
	verifierKey, _ := os.ReadFile(verifier)
	verifiers, err := readVerifiers(t.Context(), verifier)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		flag, text string
		read       func(path string) error
	}{
		{"--journal-key", string(signerKey), func(p string) error { _, err := readSigner(t.Context(), p); return err }},
		{"--key", "# proxy1\n" + string(verifierKey), func(p string) error { _, err := readVerifiers(t.Context(), p); return err }},
		{"--since, a note", checkpoint, func(p string) error { _, err := readSince(t.Context(), p, verifiers); return err }},
		{"--since, a journal line", strings.SplitAfter(string(journalLines), "\n")[3], func(p string) error { _, err := readSince(t.Context(), p, verifiers); return err }},
		{"--auth-token-file", "# tokens\ns3cret alice\n", func(p string) error {
			// Read with the mark, the comment was the token "\ufeff#".
			tokens, err := readTokens(t.Context(), p)
			if err == nil && !maps.Equal(tokens, map[string]string{"s3cret": "alice"}) {
				t.Errorf("%s with a byte order mark: tokens %q; want only s3cret for alice", p, tokens)
			}
			return err
		}},
	} {
		bom := filepath.Join(dir, "bom")
		os.WriteFile(bom, append([]byte{0xEF, 0xBB, 0xBF}, tt.text...), 0o600)
		if err := tt.read(bom); err != nil {
			t.Errorf("%s: a file that starts with a UTF-8 byte order mark: %v; want it read as without", tt.flag, err)
		}
		wide := filepath.Join(dir, "utf16")
		var b bytes.Buffer
		for _, u := range utf16.Encode([]rune("\ufeff" + tt.text)) {
			b.Write([]byte{byte(u), byte(u >> 8)})
		}
		os.WriteFile(wide, b.Bytes(), 0o600)
		if err := tt.read(wide); err == nil || !strings.Contains(err.Error(), wide+" starts with a UTF-16 byte order mark") {
			t.Errorf("%s: a file in UTF-16: %v; want an error naming it and its byte order mark", tt.flag, err)
		}
	}
}

// TestTextFilesAreSmall: a key, token or checkpoint file is a few lines;
// a file past maxTextFile, such as a journal given as --key by mistake,
// or an endless device, is refused naming it, not read into memory.
func TestTextFilesAreSmall(t *testing.T) {
	big := filepath.Join(t.TempDir(), "journal.jsonl")
	os.WriteFile(big, bytes.Repeat([]byte("{}\n"), maxTextFile/3+1), 0o600)
	for _, path := range []string{big, "/dev/zero"} {
		if _, err := os.Stat(path); err != nil {
			continue // no /dev/zero here
		}
		_, _, err := run(t, "audit", "verify", "--key", path, big)
		if want := "--key: " + path + " is larger than 1MiB"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("audit verify --key %s = %v; want an error saying %q", path, err, want)
		}
	}
}
