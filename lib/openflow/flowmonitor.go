package openflow

import (
	"encoding/binary"
	"fmt"
)

// FlowMonitorCommand is ofp_flow_monitor_command.
type FlowMonitorCommand uint8

// Flow monitor commands.
const (
	FlowMonitorAdd    FlowMonitorCommand = 0 // start a monitor
	FlowMonitorModify FlowMonitorCommand = 1 // change a monitor
	FlowMonitorDelete FlowMonitorCommand = 2 // cancel a monitor
)

// FlowMonitorFlags is the OFPFMF_* bit set of a flow monitor request.
type FlowMonitorFlags uint16

// Flow monitor flags. Open vSwitch 3.1 refuses MonitorNoAbbrev: changes
// made on the monitoring connection itself come as abbreviated updates
// (event FlowUpdateAbbrev with the xid of the change) unless MonitorOnlyOwn
// is set.
const (
	MonitorInitial      FlowMonitorFlags = 1 << 0 // report the flows that already match
	MonitorAdded        FlowMonitorFlags = 1 << 1
	MonitorRemoved      FlowMonitorFlags = 1 << 2
	MonitorModified     FlowMonitorFlags = 1 << 3
	MonitorInstructions FlowMonitorFlags = 1 << 4 // include the instructions
	MonitorNoAbbrev     FlowMonitorFlags = 1 << 5
	MonitorOnlyOwn      FlowMonitorFlags = 1 << 6 // full updates for this connection's own changes
)

// FlowMonitorRequest is an OFPMP_FLOW_MONITOR multipart request (OF1.4 and
// later). The switch answers with a (possibly empty, with MonitorInitial
// non-empty) reply, then sends flow monitor replies with xid 0 as flows
// change. Open vSwitch sends those updates only on a connection that has
// enabled asynchronous messages (a non-zero miss_send_len on the bridge's
// management socket).
//
//	4 bytes: monitor_id
//	4 bytes: out_port
//	4 bytes: out_group
//	2 bytes: flags
//	1 byte: table_id
//	1 byte: command
//	ofp_match
type FlowMonitorRequest struct {
	ID       uint32
	OutPort  uint32 // PortAny for any
	OutGroup uint32 // GroupAny for any
	Flags    FlowMonitorFlags
	Table    uint8 // TableAll for every table
	Command  FlowMonitorCommand
	Match    Match
}

// NewFlowMonitorRequest returns a request that starts monitor id on every
// flow of every table.
func NewFlowMonitorRequest(id uint32, flags FlowMonitorFlags) *FlowMonitorRequest {
	return &FlowMonitorRequest{ID: id, OutPort: PortAny, OutGroup: GroupAny, Flags: flags, Table: TableAll, Command: FlowMonitorAdd}
}

func (m *FlowMonitorRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) || v < Version14 {
		return TypeMultipartRequest, b, fmt.Errorf("flow monitor request: %w", errVersion(v))
	}
	b = appendMultipartHeader(b, MultipartFlowMonitor, 0)
	b = binary.BigEndian.AppendUint32(b, m.ID)
	b = binary.BigEndian.AppendUint32(b, m.OutPort)
	b = binary.BigEndian.AppendUint32(b, m.OutGroup)
	b = binary.BigEndian.AppendUint16(b, uint16(m.Flags))
	b = append(b, m.Table, uint8(m.Command))
	b, err := m.Match.AppendBinary(b)
	if err != nil {
		return TypeMultipartRequest, b, fmt.Errorf("flow monitor request: match: %w", err)
	}
	return TypeMultipartRequest, b, nil
}

// FlowUpdateEvent is ofp_flow_update_event.
type FlowUpdateEvent uint16

// Flow update events.
const (
	FlowUpdateInitial  FlowUpdateEvent = 0 // a flow that existed when the monitor started
	FlowUpdateAdded    FlowUpdateEvent = 1
	FlowUpdateRemoved  FlowUpdateEvent = 2
	FlowUpdateModified FlowUpdateEvent = 3
	FlowUpdateAbbrev   FlowUpdateEvent = 4 // this connection's own change, by xid
	FlowUpdatePaused   FlowUpdateEvent = 5 // too many updates queued; some were lost
	FlowUpdateResumed  FlowUpdateEvent = 6 // updates flow again; resynchronise
)

// String returns the event as ofp-print spells it.
func (e FlowUpdateEvent) String() string {
	switch e {
	case FlowUpdateInitial:
		return "INITIAL"
	case FlowUpdateAdded:
		return "ADDED"
	case FlowUpdateRemoved:
		return "DELETED"
	case FlowUpdateModified:
		return "MODIFIED"
	case FlowUpdateAbbrev:
		return "ABBREV"
	case FlowUpdatePaused:
		return "PAUSED"
	case FlowUpdateResumed:
		return "RESUMED"
	}
	return fmt.Sprintf("event(%d)", uint16(e))
}

// full reports whether the event carries a flow.
func (e FlowUpdateEvent) full() bool { return e <= FlowUpdateModified }

// FlowUpdate is one update of a flow monitor reply. Events Initial, Added,
// Removed and Modified describe a flow; Abbrev has only Xid; Paused and
// Resumed have nothing else.
type FlowUpdate struct {
	Event        FlowUpdateEvent
	Table        uint8
	Reason       FlowRemovedReason // Removed only
	IdleTimeout  uint16
	HardTimeout  uint16
	Priority     uint16
	Cookie       uint64
	Match        Match
	Instructions []Instruction // only with MonitorInstructions
	Xid          uint32        // Abbrev only
}

// Flow returns the flow a full update describes.
func (u *FlowUpdate) Flow() Flow {
	return Flow{
		Table: u.Table, Priority: u.Priority, Cookie: u.Cookie, Match: u.Match,
		Instructions: u.Instructions, IdleTimeout: u.IdleTimeout, HardTimeout: u.HardTimeout,
	}
}

// String renders the update for logs, e.g. "ADDED table=7 priority=99,ip".
func (u *FlowUpdate) String() string {
	switch {
	case u.Event == FlowUpdateAbbrev:
		return fmt.Sprintf("ABBREV xid=0x%x", u.Xid)
	case !u.Event.full():
		return u.Event.String()
	}
	s := u.Event.String()
	if u.Event == FlowUpdateRemoved {
		s += " reason=" + u.Reason.String()
	}
	return s + u.Flow().String()
}

// Flow update sizes.
const (
	flowUpdateFullLen  = 24
	flowUpdateShortLen = 8
)

// unmarshalFlowUpdates decodes flow monitor reply updates.
//
// Full (initial, added, removed, modified):
//
//	2 bytes: length
//	2 bytes: event
//	1 byte: table_id
//	1 byte: reason
//	2 bytes: idle_timeout
//	2 bytes: hard_timeout
//	2 bytes: priority
//	4 bytes: zero
//	8 bytes: cookie
//	ofp_match
//	instructions
//
// Abbreviated: length(2) event(2) xid(4). Paused, resumed: length(2)
// event(2) zero(4).
func unmarshalFlowUpdates(b []byte, v Version) ([]FlowUpdate, error) {
	var out []FlowUpdate
	for i := 0; len(b) > 0; i++ {
		if err := need(b, flowUpdateShortLen, fmt.Sprintf("update %d", i)); err != nil {
			return nil, err
		}
		n := int(binary.BigEndian.Uint16(b[0:2]))
		u := FlowUpdate{Event: FlowUpdateEvent(binary.BigEndian.Uint16(b[2:4]))}
		minLen := flowUpdateShortLen
		if u.Event.full() {
			minLen = flowUpdateFullLen
		}
		if n < minLen || n > len(b) {
			return nil, fmt.Errorf("update %d (%s): length %d of %d bytes: %w", i, u.Event, n, len(b), ErrMalformed)
		}
		e := b[:n]
		switch {
		case u.Event.full():
			u.Table = e[4]
			u.Reason = FlowRemovedReason(e[5])
			u.IdleTimeout = binary.BigEndian.Uint16(e[6:8])
			u.HardTimeout = binary.BigEndian.Uint16(e[8:10])
			u.Priority = binary.BigEndian.Uint16(e[10:12])
			u.Cookie = binary.BigEndian.Uint64(e[16:24])
			match, k, err := UnmarshalMatch(e[flowUpdateFullLen:])
			if err != nil {
				return nil, fmt.Errorf("update %d (%s): match: %w", i, u.Event, err)
			}
			u.Match = match
			if u.Instructions, err = UnmarshalInstructions(e[flowUpdateFullLen+k:], v); err != nil {
				return nil, fmt.Errorf("update %d (%s): instructions: %w", i, u.Event, err)
			}
		case u.Event == FlowUpdateAbbrev:
			u.Xid = binary.BigEndian.Uint32(e[4:8])
		}
		out = append(out, u)
		b = b[n:]
	}
	return out, nil
}

// appendFlowUpdates appends flow monitor reply updates.
func appendFlowUpdates(b []byte, v Version, updates []FlowUpdate) ([]byte, error) {
	for i := range updates {
		u := &updates[i]
		start := len(b)
		b = append(b, 0, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(u.Event))
		switch {
		case u.Event.full():
			b = append(b, u.Table, uint8(u.Reason))
			b = binary.BigEndian.AppendUint16(b, u.IdleTimeout)
			b = binary.BigEndian.AppendUint16(b, u.HardTimeout)
			b = binary.BigEndian.AppendUint16(b, u.Priority)
			b = append(b, 0, 0, 0, 0)
			b = binary.BigEndian.AppendUint64(b, u.Cookie)
			var err error
			if b, err = u.Match.AppendBinary(b); err != nil {
				return b, fmt.Errorf("update %d: match: %w", i, err)
			}
			if b, err = AppendInstructions(b, v, u.Instructions); err != nil {
				return b, fmt.Errorf("update %d: instructions: %w", i, err)
			}
		case u.Event == FlowUpdateAbbrev:
			b = binary.BigEndian.AppendUint32(b, u.Xid)
		default:
			b = append(b, 0, 0, 0, 0)
		}
		if len(b)-start > 0xffff {
			return b, fmt.Errorf("update %d: %w", i, ErrTooLong)
		}
		binary.BigEndian.PutUint16(b[start:], uint16(len(b)-start))
	}
	return b, nil
}
