package docs

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestLayoutNamesEveryPackage checks that the README's layout names
// every package under cmd/ and internal/, and every folder of tests under
// test/: on a line of its own or, as recordtest, by its name on its
// parent's line, so that a package added or moved does not leave the
// map of the code behind.
func TestLayoutNamesEveryPackage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(data), "\n## Layout\n")
	if !ok {
		t.Fatal(`README.md has no "## Layout" section`)
	}
	named := map[string]bool{}
	lines := map[string][]string{} // the words of each path's line
	for _, line := range strings.Split(layout, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			named[f[0]] = true
			lines[f[0]] = strings.FieldsFunc(line, func(r rune) bool {
				return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '/' && r != '_'
			})
		}
	}
	found := 0
	for _, top := range []string{"cmd", "internal", "test"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") {
				return nil
			}
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			pkg := filepath.ToSlash(rel)
			if top == "test" && strings.Count(pkg, "/") > 1 {
				return nil // a test's own server, part of its tests
			}
			if !named[pkg] && !slices.Contains(lines[path.Dir(pkg)], path.Base(pkg)) {
				t.Errorf("README.md's layout does not name %s", pkg)
				named[pkg] = true // once
			}
			found++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if found == 0 {
		t.Error("found no Go files under cmd/, internal/ and test/")
	}
}
