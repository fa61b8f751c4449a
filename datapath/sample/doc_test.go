package sample

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"nodeflow/datapath/plan"
)

var update = flag.Bool("update", false, "rewrite the generated flow shapes in docs/pipeline.md")

const pipelineDoc = "../../docs/pipeline.md"

// shapesSection names the generated section of table tb's flow shapes.
func shapesSection(tb plan.Table) string { return fmt.Sprintf("flows:%s-table-%d", tb.Bridge, tb.ID) }

// renderShapes renders the shapes of one table as the document holds them.
func renderShapes(shapes []Shape, tb plan.Table) string {
	var sb strings.Builder
	var rows []Shape
	for _, s := range shapes {
		if s.Table == tb.ID {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		sb.WriteString("Built by the features: nothing (generated from `datapath/sample`).\n")
		return sb.String()
	}
	sb.WriteString("Built (flow shapes of the sample, generated from `datapath/sample`):\n\n")
	sb.WriteString("| priority | match | actions | feature |\n|---:|---|---|---|\n")
	for _, s := range rows {
		match := "`" + s.Match + "`"
		if s.Match == "" {
			match = "(any)"
		}
		fmt.Fprintf(&sb, "| %d | %s | `%s` | %s |\n", s.Priority, match, s.Actions, s.Feature)
	}
	return sb.String()
}

// TestPipelineDocShapes checks that every table's section of
// docs/pipeline.md ends with the shapes of the flows the builders produce
// for the sample (run with -update to rewrite them, and to add the
// sections that are missing), so that the document cannot describe a flow
// that is not built without showing the difference beside it.
func TestPipelineDocShapes(t *testing.T) {
	d, err := Build(Default())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(pipelineDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	rewritten := doc
	for _, b := range plan.Bridges {
		shapes := d.Shapes(b)
		for _, tb := range plan.Tables(b) {
			want := renderShapes(shapes, tb)
			begin := fmt.Sprintf("<!-- BEGIN %s -->\n", shapesSection(tb))
			end := fmt.Sprintf("<!-- END %s -->", shapesSection(tb))
			h := strings.Index(rewritten, plan.Heading(tb)+"\n")
			if h < 0 {
				t.Errorf("docs/pipeline.md has no section %q", plan.Heading(tb))
				continue
			}
			next := strings.Index(rewritten[h+1:], "\n#")
			if next < 0 {
				next = len(rewritten) - h - 1
			}
			sectionEnd := h + 1 + next // the newline before the next heading
			i := strings.Index(rewritten, begin)
			j := strings.Index(rewritten, end)
			switch {
			case i < 0 && j < 0:
				if !*update {
					t.Errorf("docs/pipeline.md: section %q has no generated flow shapes; run `go test ./flows/sample -run TestPipelineDocShapes -update`", plan.Heading(tb))
					continue
				}
				rewritten = rewritten[:sectionEnd+1] + begin + want + end + "\n\n" + rewritten[sectionEnd+1:]
			case i < h || j < i || j > sectionEnd:
				t.Errorf("docs/pipeline.md: the generated shapes %s must be inside section %q", shapesSection(tb), plan.Heading(tb))
			default:
				if got := rewritten[i+len(begin) : j]; got != want {
					if !*update {
						t.Errorf("docs/pipeline.md: the flow shapes of %s are out of date with the builders; run `go test ./flows/sample -run TestPipelineDocShapes -update`\n--- have\n%s--- want\n%s", tb, got, want)
					}
					rewritten = rewritten[:i+len(begin)] + want + rewritten[j:]
				}
			}
		}
	}
	if *update && rewritten != doc {
		if err := os.WriteFile(pipelineDoc, []byte(rewritten), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
