package plan

import (
	"fmt"
	"sort"
	"strings"

	"nodeflow/datapath/conntrack"
)

// ReferenceSections names the reference sections of docs/pipeline.md that
// are generated from this package, in document order.
var ReferenceSections = []string{"tables-br0", "tables-breth0", "fields", "marks", "zones", "features", "ids", "paths", "longest"}

// RenderReference renders one generated section of docs/pipeline.md as
// Markdown. The document holds each between
// "<!-- BEGIN plan:NAME -->" and "<!-- END plan:NAME -->" lines, and a test
// fails when they differ from what this returns.
func RenderReference(name string) (string, error) {
	var sb strings.Builder
	switch name {
	case "tables-br0", "tables-breth0":
		b := Pod
		if name == "tables-breth0" {
			b = Gateway
		}
		sb.WriteString("| table | name | miss | features | decides |\n|---:|---|---|---|---|\n")
		for _, t := range Tables(b) {
			fmt.Fprintf(&sb, "| %d | [%s](#%s) | %s | %s | %s |\n", t.ID, t.Name, anchor(t), missText(t), featureList(t.Features), t.Summary)
		}
	case "fields":
		sb.WriteString("| bridge | field | bits | name | holds |\n|---|---|---|---|---|\n")
		fs := Fields()
		sort.SliceStable(fs, func(i, j int) bool {
			if fs[i].bridge != fs[j].bridge {
				return fs[i].bridge < fs[j].bridge
			}
			if fs[i].space != fs[j].space {
				return fs[i].space < fs[j].space
			}
			if fs[i].index != fs[j].index {
				return fs[i].index < fs[j].index
			}
			return fs[i].start < fs[j].start
		})
		for _, f := range fs {
			fmt.Fprintf(&sb, "| %s | `%s` | %d | %s | %s |\n", f.bridge, f, f.Width(), f.name, f.doc)
		}
	case "marks":
		sb.WriteString("| field | value | mark |\n|---|---:|---|\n")
		for _, m := range Marks() {
			fmt.Fprintf(&sb, "| %s (`%s`) | %#x | %s |\n", m.field.name, m.field, m.value, m.name)
		}
	case "zones":
		sb.WriteString("| zone | bridge | name | use |\n|---:|---|---|---|\n")
		for _, z := range conntrack.Zones() {
			fmt.Fprintf(&sb, "| %d | %s | %s | %s |\n", z.Zone, z.Bridge, z.Name, z.Doc)
		}
		fmt.Fprintf(&sb, "\nbreth0 reserves %s; no br0 zone may fall inside it.\n", conntrack.GatewayReserved)
	case "features":
		sb.WriteString("| feature | cookie bits 63-56 | owner prefix | flows |\n|---|---|---|---|\n")
		for _, f := range Features() {
			prefix := "(none)"
			if f.Prefix != "" {
				prefix = "`" + f.Prefix + "/...`"
			}
			fmt.Fprintf(&sb, "| %s | 0x%02x | %s | %s |\n", f.Name, uint8(f.Feature), prefix, f.Doc)
		}
	case "ids":
		sb.WriteString("| what | ids |\n|---|---|\n")
		fmt.Fprintf(&sb, "| br0 service groups (%s); the group id is also the ServiceID | %d-%d |\n", ServiceGroups.Name, ServiceGroups.First, ServiceGroups.Last)
		fmt.Fprintf(&sb, "| br0 node-wide ceiling of unidling packet-ins (MeterUnidle) | %d |\n", MeterUnidle)
		fmt.Fprintf(&sb, "| br0 node-wide ceiling of no-endpoint rejects (MeterReject) | %d |\n", MeterReject)
		fmt.Fprintf(&sb, "| br0 node-wide ceiling of DNS learning (MeterEgressFirewallDNS) | %d |\n", MeterEgressFirewallDNS)
		fmt.Fprintf(&sb, "| br0 node-wide ceiling of the denied packets' log (MeterPolicyLog) | %d |\n", MeterPolicyLog)
		fmt.Fprintf(&sb, "| br0 per-source meters (SourceMeter): category<<16, ofport 1-%d or %#x (shared) | %#x-%#x |\n",
			SourcePortMax, SourceShared, uint32(PuntCategories[0])<<16|1, uint32(PuntCategories[len(PuntCategories)-1])<<16|SourceShared)
		fmt.Fprintf(&sb, "| egress firewall rule priorities (%s), first rule highest | %d-%d |\n", EgressFirewallRules.Name, EgressFirewallRules.Low, EgressFirewallRules.High)
		fmt.Fprintf(&sb, "| egress firewall bypass for cluster destinations | priority %d |\n", PriorityEgressFirewallBypass)
		fmt.Fprintf(&sb, "| controller id of nodeflow's connection | 0x%04x |\n", ControllerID)
		fmt.Fprintf(&sb, "| packet-in userdata byte 0 and PuntCategory: unidle, reject, dns, netpol-denied | %d, %d, %d, %d |\n", PacketInUnidle, PacketInReject, PacketInDNS, PacketInPolicyDenied)
		fmt.Fprintf(&sb, "| pipeline version (in the version note) | %d |\n", PipelineVersion)
	case "paths":
		sb.WriteString("| path | recirculations | tables |\n|---|---:|---|\n")
		for _, p := range Paths() {
			var hops []string
			for _, s := range p.Steps {
				h := fmt.Sprintf("%s:%d", shortBridge(s.Bridge), s.Table)
				if s.Recirc {
					h += "*"
				}
				hops = append(hops, h)
			}
			fmt.Fprintf(&sb, "| %s | %d | %s |\n", p.Name, p.Recirculations(), strings.Join(hops, " "))
		}
	case "longest":
		var longest Path
		for _, p := range Paths() {
			if p.Recirculations() > longest.Recirculations() {
				longest = p
			}
		}
		fmt.Fprintf(&sb, "%s, %d recirculations (numbered):\n\n```\n%s```\n", longest.Name, longest.Recirculations(), RenderPath(longest))
	default:
		return "", fmt.Errorf("plan: no reference section %q", name)
	}
	return sb.String(), nil
}

// RenderPath renders one path step by step, for a path's detail in the
// document and for test failure messages.
func RenderPath(p Path) string {
	var sb strings.Builder
	n := 0
	for _, s := range p.Steps {
		mark := "  "
		if s.Recirc {
			n++
			mark = fmt.Sprintf("%d ", n)
		}
		fmt.Fprintf(&sb, "%s%s table %d: %s\n", mark, s.Bridge, s.Table, s.Does)
	}
	return sb.String()
}

func shortBridge(b Bridge) string {
	if b == Gateway {
		return "eth"
	}
	return "br"
}

func missText(t Table) string {
	if t.Miss == MissGoto {
		return fmt.Sprintf("goto %d", t.Next)
	}
	return t.Miss.String()
}

func featureList(fs []Feature) string {
	var names []string
	for _, f := range fs {
		names = append(names, f.String())
	}
	return strings.Join(names, ", ")
}

// anchor is the GitHub-style anchor of a table's section heading
// "### br0 table 30: ServiceLB".
func anchor(t Table) string {
	return strings.ToLower(fmt.Sprintf("%s-table-%d-%s", t.Bridge, t.ID, t.Name))
}

// Heading is the exact heading line of t's section in docs/pipeline.md.
func Heading(t Table) string { return fmt.Sprintf("### %s table %d: %s", t.Bridge, t.ID, t.Name) }

// MissLine is the line each table section must contain, stating its miss.
func MissLine(t Table) string {
	return fmt.Sprintf("Miss: `%s`. Features: %s.", missText(t), featureList(t.Features))
}
