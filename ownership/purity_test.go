package ownership

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The core must stay a pure state machine (CONVENTIONS 1): no network,
// files, clocks, locks or goroutines in its non-test sources.
func TestCoreIsPure(t *testing.T) {
	forbidden := map[string]bool{"net": true, "os": true, "time": true, "sync": true, "sync/atomic": true,
		"runtime": true, "unsafe": true, "math/rand": true, "math/rand/v2": true, "crypto/rand": true,
		"os/exec": true, "io/ioutil": true, "syscall": true, "context": true}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		checked++
		fs := token.NewFileSet()
		file, err := parser.ParseFile(fs, f, nil, 0)
		require.NoError(t, err)
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			require.False(t, forbidden[path] || strings.HasPrefix(path, "net/"), "%s imports %s", f, path)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: a go statement at %s", f, fs.Position(n.Pos()))
			case *ast.SelectStmt:
				t.Errorf("%s: a select statement at %s", f, fs.Position(n.Pos()))
			case *ast.ChanType:
				t.Errorf("%s: a channel type at %s", f, fs.Position(n.Pos()))
			}
			return true
		})
	}
	require.GreaterOrEqual(t, checked, 8, "the core's sources were not found")
}
