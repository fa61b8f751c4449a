package openflow

// Field is one OXM (or NXM) match entry: a field's value and optional mask.
//
// Standard fields use class 0x8000, Nicira extension fields class 0x0001
// (NXM_1) or 0x0000 (NXM_0); experimenter fields use class 0xffff and carry
// their experimenter id.
type Field struct {
	Class        uint16
	Field        uint8
	Experimenter uint32 // only for class 0xffff
	Value        []byte
	Mask         []byte // nil for an exact match
}

// Match is an ofp_match of type OXM: an ordered list of fields.
type Match struct {
	Fields []Field
}
