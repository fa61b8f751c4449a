// Package ofconn is an OpenFlow connection to Open vSwitch: one persistent,
// self-healing session over a bridge's management socket
// ("unix:<rundir>/<bridge>.mgmt") or TCP ("tcp:host:port"), carrying the
// messages of package openflow.
//
// # Connecting
//
// Dial offers OF1.5 and OF1.3 (Options.Versions) in a HELLO with a version
// bitmap and uses the highest version both sides speak. It then sets the
// session up so that asynchronous messages reach it: OVS sends nothing
// asynchronous to a service connection (the .mgmt socket is one) whose
// miss_send_len is 0, and a controller(id=N) action reaches only connections
// that announced id N. So every session sends, pipelined and checked with one
// barrier:
//
//	SET_CONFIG               miss_send_len = Options.MissSendLen (0xffff)
//	NXT_SET_CONTROLLER_ID    Options.ControllerID
//	NXT_SET_PACKET_IN_FORMAT NXT_PACKET_IN2 (userdata, continuations)
//	SET_ASYNC                packet-in no-match and action reasons, all
//	                         port-status and flow-removed reasons
//
// When the connection is lost (socket error, or an echo request unanswered
// for Options.EchoTimeout), pending operations fail with ErrDisconnected and
// the Conn reconnects with exponential back-off between Options.ReconnectMin
// and ReconnectMax, redoing the setup. Options.OnConnect hears about every
// session, with Restarted set when the switch lost its state: a different
// datapath id or features, or, with Options.DetectEmptyTables, no flows. The
// callback replays flows, groups and meters. Operations fail fast while
// disconnected rather than queue for a switch that may have forgotten
// everything.
//
// # Requests
//
// Every method takes a context and is safe for concurrent use. Requests
// are matched to replies by transaction id; an ERROR answering a request
// comes back as an *OpError wrapping *openflow.OFError. Multipart replies
// are reassembled (OFPMPF_REPLY_MORE). Apply pipelines any number of
// messages behind one barrier and names each message the switch rejected
// (*BatchError of *MessageError).
//
// # Asynchronous messages
//
// Packet-ins, flow-removed, port-status, flow-monitor updates and unmatched
// errors go to Options.Handlers, each kind through its own bounded queue
// (Options.QueueLen) and goroutine. The reader never blocks on a handler: when
// a queue is full the message is dropped and counted (Stats), so a packet-in
// flood cannot exhaust memory or delay replies. (OVS stops reading a
// connection that has 100 unsent replies queued, so a reader that blocked
// could deadlock a writer.)
//
// # Bundles
//
// Bundle applies a list of flow mods, group mods or packet-outs atomically:
// OPEN, every ADD and a BARRIER are written back to back without waiting,
// then COMMIT. The barrier matters: OVS 3.1 checks each message when it is
// added, reports a bad one with the add's xid, and leaves it out of the
// bundle, so a commit without checking would apply the others. Commit
// therefore discards a bundle with a rejected add. A message that fails when
// the bundle is applied makes OVS revert everything, report the failing add's
// xid and answer the commit with OFPBFC_MSG_FAILED; either way the error names
// the message, e.g.
//
//	ofconn: bundle 7 commit: message 3 of 12 (ADD table:31 ...): OFPBAC_BAD_OUT_GROUP (type 2 code 9)
//
// A bundle of one message is sent as the message and a barrier: one round
// trip instead of two, with the same all-or-nothing outcome.
//
// OpenBundle, Add, Commit and Discard give finer control; Add can be called
// many times (for instance per feature) before one Commit. OF1.5 sessions use
// OFPT_BUNDLE_CONTROL/ADD_MESSAGE, OF1.3 sessions the ONF experimenter form.
//
// # Large groups
//
// A message holds at most 65,535 bytes, and a bundled one 16 fewer. A select
// group with thousands of buckets (5,000 buckets of a register load and a
// resubmit take about 240 KB) does not fit. SplitGroupMod cuts it into the
// original ADD or MODIFY with as many buckets as fit, followed by OF1.5
// INSERT_BUCKET group mods (command_bucket_id "last") with the rest; the
// inserts carry no selection method, which OVS rejects there and which the
// group keeps from the first message. InstallGroup sends the parts in one
// bundle, so packets never see a partial group. OF1.3 has no INSERT_BUCKET:
// splitting needs an OF1.5 session.
//
// Reading such a group back is not possible with OVS 3.1: it writes group
// description and group statistics entries over 64 KiB with their 16-bit
// length fields wrapped (ovs-ofctl dump-groups shows decode errors too). The
// Conn checks that every message has the negotiated version and follows each
// multipart request with a barrier, so such a reply fails with
// ErrDisconnected (and the connection is re-established) instead of being
// returned truncated or desynchronising the stream.
package ofconn
