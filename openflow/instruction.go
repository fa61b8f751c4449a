package openflow

// Instruction is one OpenFlow instruction: goto_table, apply_actions,
// write_actions, clear_actions, write_metadata or meter. In OF1.5 the meter
// instruction is encoded as a meter action at the head of apply_actions.
type Instruction interface {
	// appendInstruction appends the encoded instruction.
	appendInstruction(b []byte, v Version) ([]byte, error)
	String() string
}
