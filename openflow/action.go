package openflow

// Action is one OpenFlow action: a standard one (output, group, set_field, ...)
// or a Nicira/ONF extension (resubmit, ct, nat, learn, controller2, ...).
//
// String renders the action in ovs-ofctl syntax, exactly as
// `ovs-ofctl -O OpenFlow15 dump-flows` prints it.
type Action interface {
	// appendAction appends the encoded action, padded to a multiple of 8.
	appendAction(b []byte, v Version) ([]byte, error)
	String() string
}
