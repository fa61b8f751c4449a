package main

import (
	"testing"

	"nodeflow/agent/config"
)

// The configuration file's namespaceBudget sets a flag the agent has.
func TestNamespaceBudgetFlag(t *testing.T) {
	n := 5000
	st := (&config.AgentConfiguration{NamespaceBudget: &n}).Settings()
	if len(st) != 1 {
		t.Fatalf("settings %+v", st)
	}
	for _, f := range agentCommand().Flags {
		for _, name := range f.Names() {
			if name == st[0].Flag {
				return
			}
		}
	}
	t.Errorf("namespaceBudget sets --%s, which the agent does not have", st[0].Flag)
}
