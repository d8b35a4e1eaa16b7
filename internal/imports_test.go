package internal_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The import rules of the tree, run by `make lint`. Every package of the module is in one of
// the tables below, so that a new package fails here until someone decides where it belongs.

const module = "github.com/cri-dockerd/cri-dockerd"

// parts are the main parts: each may import the leaves and the parts it names.
var parts = map[string][]string{
	"internal/config":       nil,
	"internal/libdocker":    nil,
	"internal/execkill":     {"internal/libdocker"},
	"internal/containerlog": {"internal/libdocker"},
	"internal/network":      nil,
	"internal/store":        {"internal/libdocker"},
	"internal/stats":        {"internal/libdocker"},
	"internal/imagevolume":  {"internal/libdocker"},
	"internal/streaming":    {"internal/execkill", "internal/libdocker"},
	"internal/metrics":      nil,
	"internal/nri":          nil,
	"internal/core":         {"internal/containerlog", "internal/execkill", "internal/imagevolume", "internal/libdocker", "internal/network", "internal/nri", "internal/stats", "internal/store"},
	"internal/doctor":       {"internal/config", "internal/core", "internal/libdocker"},
	"cmd/cri-dockerd":       {"internal/config", "internal/core", "internal/doctor", "internal/libdocker", "internal/metrics", "internal/network", "internal/nri", "internal/store", "internal/streaming"},
}

// leaves do one small job and import no part; they may import other leaves.
var leaves = []string{
	"internal/core/startgate",
	"internal/dockerid",
	"internal/fswalk",
	"internal/kerneloom",
	"internal/keyedmutex",
	"internal/libdocker/containerdroot",
	"internal/netns",
	"internal/network/podcidr",
	"internal/quantity",
	"internal/replycodec",
	"internal/runtimecgroups",
	"internal/standby",
	"internal/stats/runscstats",
	"internal/unifiedcgroup",
	"internal/procuser",
	"internal/checkpointarchive",
	"internal/supervise",
	"internal/version",
}

// testOnly packages exist for tests: no non-test file imports them.
var testOnly = []string{
	"integration",
	"test/images/pause",
	"test/nri-plugins",
	"internal",
	"internal/execkill/execkilltest",
	"internal/nri/nritest",
	"internal/stats/statstest",
	"internal/testutil",
}

// dockerClient is Docker's Go client: libdocker alone talks to Docker. The integration tests
// check Docker's own view with it too, as a user would.
const dockerClient = "github.com/docker/docker/client"

type goFile struct {
	pkg     string // directory relative to the module root
	name    string
	test    bool
	imports []string
}

func TestImportRules(t *testing.T) {
	files := parseTree(t, "..")
	known := map[string]bool{}
	for p := range parts {
		known[p] = true
	}
	for _, p := range slices.Concat(leaves, testOnly) {
		known[p] = true
	}
	isLeaf := func(p string) bool { return slices.Contains(leaves, p) }
	seen := map[string]bool{}
	for _, f := range files {
		where := path.Join(f.pkg, f.name)
		if !known[f.pkg] && !seen[f.pkg] {
			t.Errorf("package %s is in none of the tables of internal/imports_test.go: add it to parts (with what it may import), leaves or testOnly", f.pkg)
		}
		seen[f.pkg] = true
		for _, imp := range f.imports {
			if imp == dockerClient && f.pkg != "internal/libdocker" && !strings.HasPrefix(f.pkg, "integration") {
				t.Errorf("%s imports Docker's client: only internal/libdocker talks to Docker", where)
			}
			own, ok := strings.CutPrefix(imp, module+"/")
			if !ok || own == f.pkg {
				continue
			}
			switch {
			case strings.HasPrefix(own, "cmd/"):
				t.Errorf("%s imports %s: nothing imports cmd", where, own)
			case slices.Contains(testOnly, own) && !f.test && !slices.Contains(testOnly, f.pkg):
				t.Errorf("%s imports %s, which is for tests only", where, own)
			case f.test || slices.Contains(testOnly, f.pkg) || isLeaf(own) || slices.Contains(testOnly, own):
				// Tests may import any part below cmd; leaves are open to all.
			case isLeaf(f.pkg):
				t.Errorf("%s imports %s: a leaf imports no main part", where, own)
			case f.pkg == "internal/core" && own == "internal/config":
				t.Errorf("%s imports internal/config: core gets its settings in core.Options", where)
			default:
				if allowed, isPart := parts[f.pkg]; isPart && !slices.Contains(allowed, own) {
					t.Errorf("%s imports %s, which %s may not import (the parts table in internal/imports_test.go)", where, own, f.pkg)
				}
			}
		}
	}
	for _, p := range slices.Concat(sortedKeys(parts), leaves) {
		if !seen[p] {
			t.Errorf("%s is in the tables of internal/imports_test.go but has no Go file", p)
		}
	}
}

// parseTree reads the imports of every Go file of the module under root, skipping testdata
// and nested modules (their own go.mod).
func parseTree(t *testing.T, root string) []goFile {
	t.Helper()
	var files []goFile
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "bin") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		g := goFile{pkg: filepath.ToSlash(filepath.Dir(rel)), name: d.Name(), test: strings.HasSuffix(p, "_test.go")}
		for _, imp := range f.Imports {
			v, _ := strconv.Unquote(imp.Path.Value)
			g.imports = append(g.imports, v)
		}
		files = append(files, g)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("read %d Go files under %s: not the module's tree", len(files), root)
	}
	return files
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
