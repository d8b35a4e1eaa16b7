package testutil

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The helpers are for tests: a binary that linked them would carry the testing package.
func TestOnlyTestsImportTestutil(t *testing.T) {
	const self = "github.com/cri-dockerd/cri-dockerd/internal/testutil"
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if e.IsDir() {
			if rel == "integration" || rel == "vendor" || strings.HasPrefix(e.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Dir(rel) == filepath.Join("internal", "testutil") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == self {
				t.Errorf("%s imports %s: only tests and integration/ may", rel, self)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
