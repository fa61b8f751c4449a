package plan

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated sections of docs/pipeline.md")

const pipelineDoc = "../../docs/pipeline.md"

// TestPipelineDoc checks docs/pipeline.md against the plan: the generated
// reference sections must equal what RenderReference gives (run with
// -update to rewrite them), there must be exactly one section per table,
// in order, each stating the table's miss and features, and every Go
// identifier the document names must exist. The flow shapes in each table's
// section are checked by datapath/sample, which can import the builders.
func TestPipelineDoc(t *testing.T) {
	raw, err := os.ReadFile(pipelineDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)

	// Generated sections.
	rewritten := doc
	for _, name := range ReferenceSections {
		want, err := RenderReference(name)
		if err != nil {
			t.Fatal(err)
		}
		begin := fmt.Sprintf("<!-- BEGIN plan:%s -->\n", name)
		end := fmt.Sprintf("<!-- END plan:%s -->", name)
		i := strings.Index(rewritten, begin)
		j := strings.Index(rewritten, end)
		if i < 0 || j < i {
			t.Errorf("docs/pipeline.md: no generated section %s (add %q and %q lines)", name, strings.TrimSpace(begin), end)
			continue
		}
		got := rewritten[i+len(begin) : j]
		if got != want {
			if !*update {
				t.Errorf("docs/pipeline.md: section %s is out of date with the plan; run `go test ./flows/plan -run TestPipelineDoc -update`\n--- have\n%s--- want\n%s", name, got, want)
			}
			rewritten = rewritten[:i+len(begin)] + want + rewritten[j:]
		}
	}
	if *update && rewritten != doc {
		if err := os.WriteFile(pipelineDoc, []byte(rewritten), 0o644); err != nil {
			t.Fatal(err)
		}
		doc = rewritten
	}

	// One section per table, in plan order.
	var want []Table
	for _, b := range Bridges {
		want = append(want, Tables(b)...)
	}
	headingRE := regexp.MustCompile(`(?m)^### (br0|breth0) table .*$`)
	locs := headingRE.FindAllStringIndex(doc, -1)
	if len(locs) != len(want) {
		t.Errorf("docs/pipeline.md has %d table sections, the plan has %d tables", len(locs), len(want))
	}
	for i, loc := range locs {
		heading := doc[loc[0]:loc[1]]
		if i >= len(want) {
			t.Errorf("docs/pipeline.md: extra section %q", heading)
			continue
		}
		tb := want[i]
		if heading != Heading(tb) {
			t.Errorf("docs/pipeline.md: section %d is %q, want %q", i, heading, Heading(tb))
			continue
		}
		body := doc[loc[1]:]
		if k := strings.Index(body, "\n#"); k >= 0 {
			body = body[:k]
		}
		if !strings.Contains(body, MissLine(tb)) {
			t.Errorf("docs/pipeline.md: section %q must state %q", heading, MissLine(tb))
		}
	}

	// Every `pkg.Name` the document mentions must exist.
	exported := map[string]map[string]bool{}
	for pkg, dir := range map[string]string{"plan": ".", "reconcile": "../reconcile", "conntrack": "../conntrack",
		"gatewayflows": "../gatewayflows", "nodeflows": "../nodeflows", "serviceflows": "../serviceflows", "sample": "../sample"} {
		exported[pkg] = exportedNames(t, dir)
	}
	refRE := regexp.MustCompile("`(plan|reconcile|conntrack|gatewayflows|nodeflows|serviceflows|sample)\\.([A-Z][A-Za-z0-9_]*)")
	for _, m := range refRE.FindAllStringSubmatch(doc, -1) {
		if !exported[m[1]][m[2]] {
			t.Errorf("docs/pipeline.md names %s.%s, which does not exist", m[1], m[2])
		}
	}
}

// exportedNames returns the exported top-level names (and methods, as
// Type.Method) declared by the non-test Go files in dir.
func exportedNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				names[d.Name.Name] = true
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return names
}
