package plan

import "fmt"

// packetInNames are the categories' names in metrics and logs.
var packetInNames = map[PacketInCategory]string{
	PacketInUnidle: "unidle",
	PacketInReject: "reject",
	PacketInDNS:    "dns",

	PacketInPolicyDenied: "netpol-denied",
}

// String names the category ("reject"), or "category(N)" when undeclared.
func (c PacketInCategory) String() string {
	if n, ok := packetInNames[c]; ok {
		return n
	}
	return fmt.Sprintf("category(%d)", uint8(c))
}
