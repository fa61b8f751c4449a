package openflow

import (
	"encoding/binary"
	"fmt"
)

// MultipartType is ofp_multipart_type (OFPMP_*).
type MultipartType uint16

// Multipart types. FlowMonitor exists from OF1.4.
const (
	MultipartDesc          MultipartType = 0
	MultipartFlow          MultipartType = 1
	MultipartAggregate     MultipartType = 2
	MultipartTable         MultipartType = 3
	MultipartPortStats     MultipartType = 4
	MultipartQueueStats    MultipartType = 5
	MultipartGroup         MultipartType = 6
	MultipartGroupDesc     MultipartType = 7
	MultipartGroupFeatures MultipartType = 8
	MultipartMeter         MultipartType = 9
	MultipartMeterConfig   MultipartType = 10
	MultipartMeterFeatures MultipartType = 11
	MultipartTableFeatures MultipartType = 12
	MultipartPortDesc      MultipartType = 13
	MultipartTableDesc     MultipartType = 14
	MultipartQueueDesc     MultipartType = 15
	MultipartFlowMonitor   MultipartType = 16
	MultipartExperimenter  MultipartType = 0xffff
)

var multipartNames = map[MultipartType]string{
	MultipartDesc: "desc", MultipartFlow: "flow", MultipartAggregate: "aggregate", MultipartTable: "table",
	MultipartPortStats: "port stats", MultipartQueueStats: "queue stats", MultipartGroup: "group stats",
	MultipartGroupDesc: "group desc", MultipartGroupFeatures: "group features", MultipartMeter: "meter stats",
	MultipartMeterConfig: "meter config", MultipartMeterFeatures: "meter features",
	MultipartTableFeatures: "table features", MultipartPortDesc: "port desc", MultipartTableDesc: "table desc",
	MultipartQueueDesc: "queue desc", MultipartFlowMonitor: "flow monitor", MultipartExperimenter: "experimenter",
}

// String names the type, e.g. "flow" or "group desc".
func (t MultipartType) String() string {
	if s, ok := multipartNames[t]; ok {
		return s
	}
	return fmt.Sprintf("multipart(%d)", uint16(t))
}

// MultipartFlags are the flags of a multipart message.
type MultipartFlags uint16

// MultipartMore is OFPMPF_REQ_MORE in requests and OFPMPF_REPLY_MORE in
// replies: more parts of the same message follow, with the same xid.
const MultipartMore MultipartFlags = 1

// multipartHeaderLen is type(2) flags(2) pad(4), after the ofp_header.
const multipartHeaderLen = 8

// MultipartRequest is OFPT_MULTIPART_REQUEST (type 18) with an encoded body.
// Unmarshal decodes every multipart request into this form. The typed
// requests (FlowStatsRequest, GroupDescRequest, ...) encode their own
// version-specific bodies.
//
//	2 bytes: type
//	2 bytes: flags
//	4 bytes: pad
//	body
type MultipartRequest struct {
	Type  MultipartType
	Flags MultipartFlags
	Body  []byte
}

func (m *MultipartRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b = appendMultipartHeader(b, m.Type, m.Flags)
	return TypeMultipartRequest, append(b, m.Body...), nil
}

// MultipartReply is one OFPT_MULTIPART_REPLY (type 19) message. Body holds
// the encoded entries; the typed accessors (FlowStats, GroupDesc, ...)
// decode them for Version. Open vSwitch never splits an entry across
// messages, so each part decodes on its own; MergeMultipartReplies joins the
// parts of one reply.
type MultipartReply struct {
	// Version is the version the reply was decoded from (set by Unmarshal)
	// and decides how the accessors read Body. Encoding uses the version
	// passed to Marshal.
	Version Version
	Type    MultipartType
	Flags   MultipartFlags
	Body    []byte
}

// More reports whether more parts of this reply follow.
func (m *MultipartReply) More() bool { return m.Flags&MultipartMore != 0 }

func (m *MultipartReply) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b = appendMultipartHeader(b, m.Type, m.Flags)
	return TypeMultipartReply, append(b, m.Body...), nil
}

func appendMultipartHeader(b []byte, t MultipartType, f MultipartFlags) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(t))
	b = binary.BigEndian.AppendUint16(b, uint16(f))
	return append(b, 0, 0, 0, 0)
}

func decodeMultipartRequest(h Header, body []byte) (Message, error) {
	if err := need(body, multipartHeaderLen, "multipart request"); err != nil {
		return nil, err
	}
	return &MultipartRequest{
		Type:  MultipartType(binary.BigEndian.Uint16(body[0:2])),
		Flags: MultipartFlags(binary.BigEndian.Uint16(body[2:4])),
		Body:  clone(body[multipartHeaderLen:]),
	}, nil
}

func decodeMultipartReply(h Header, body []byte) (Message, error) {
	r, err := viewMultipartBody(h, body)
	if err != nil {
		return nil, err
	}
	r.Body = clone(r.Body)
	return r, nil
}

// viewMultipartBody reads the multipart reply body (after the header h)
// in place: the result's Body is body's memory.
func viewMultipartBody(h Header, body []byte) (*MultipartReply, error) {
	if err := need(body, multipartHeaderLen, "multipart reply"); err != nil {
		return nil, err
	}
	return &MultipartReply{
		Version: h.Version,
		Type:    MultipartType(binary.BigEndian.Uint16(body[0:2])),
		Flags:   MultipartFlags(binary.BigEndian.Uint16(body[2:4])),
		Body:    body[multipartHeaderLen:],
	}, nil
}

// MergeMultipartReplies joins the parts of one multipart reply, in order:
// every part but the last must have MultipartMore set, and all must share
// the version and type. The result has the parts' bodies concatenated and
// MultipartMore clear.
func MergeMultipartReplies(parts []*MultipartReply) (*MultipartReply, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("openflow: merge multipart replies: no parts: %w", ErrMalformed)
	}
	first := parts[0]
	n := 0
	for i, p := range parts {
		if p.Type != first.Type || p.Version != first.Version {
			return nil, fmt.Errorf("openflow: merge multipart replies: part %d is %s %s, part 0 %s %s: %w", i, p.Version, p.Type, first.Version, first.Type, ErrMalformed)
		}
		if last := i == len(parts)-1; p.More() == last {
			if last {
				return nil, fmt.Errorf("openflow: merge multipart replies: last part %d has the more flag: %w", i, ErrMalformed)
			}
			return nil, fmt.Errorf("openflow: merge multipart replies: part %d of %d lacks the more flag: %w", i, len(parts), ErrMalformed)
		}
		n += len(p.Body)
	}
	body := make([]byte, 0, n)
	for _, p := range parts {
		body = append(body, p.Body...)
	}
	return &MultipartReply{Version: first.Version, Type: first.Type, Flags: first.Flags &^ MultipartMore, Body: body}, nil
}

// checkType returns an error when r is not a reply of type t.
func (m *MultipartReply) checkType(t MultipartType) error {
	if m.Type != t {
		return fmt.Errorf("openflow: multipart reply is %s, not %s: %w", m.Type, t, ErrMalformed)
	}
	if !versionOK(m.Version) {
		return fmt.Errorf("openflow: %s reply: %w", t, errVersion(m.Version))
	}
	return nil
}

// FlowStats decodes a flow stats reply.
func (m *MultipartReply) FlowStats() ([]FlowStats, error) {
	if err := m.checkType(MultipartFlow); err != nil {
		return nil, err
	}
	s, err := unmarshalFlowStats(m.Body, m.Version)
	if err != nil {
		return nil, fmt.Errorf("openflow: flow stats reply: %w", err)
	}
	return s, nil
}

// GroupDesc decodes a group desc reply.
func (m *MultipartReply) GroupDesc() ([]GroupEntry, error) {
	if err := m.checkType(MultipartGroupDesc); err != nil {
		return nil, err
	}
	g, err := unmarshalGroupDescs(m.Body, m.Version)
	if err != nil {
		return nil, fmt.Errorf("openflow: group desc reply: %w", err)
	}
	return g, nil
}

// GroupStats decodes a group stats reply.
func (m *MultipartReply) GroupStats() ([]GroupStats, error) {
	if err := m.checkType(MultipartGroup); err != nil {
		return nil, err
	}
	g, err := unmarshalGroupStats(m.Body)
	if err != nil {
		return nil, fmt.Errorf("openflow: group stats reply: %w", err)
	}
	return g, nil
}

// PortDesc decodes a port desc reply.
func (m *MultipartReply) PortDesc() ([]Port, error) {
	if err := m.checkType(MultipartPortDesc); err != nil {
		return nil, err
	}
	var ports []Port
	for b, i := m.Body, 0; len(b) > 0; i++ {
		p, n, err := unmarshalPort(b, m.Version)
		if err != nil {
			return nil, fmt.Errorf("openflow: port desc reply: port %d: %w", i, err)
		}
		ports = append(ports, p)
		b = b[n:]
	}
	return ports, nil
}

// MeterConfig decodes a meter config reply.
func (m *MultipartReply) MeterConfig() ([]MeterEntry, error) {
	if err := m.checkType(MultipartMeterConfig); err != nil {
		return nil, err
	}
	s, err := unmarshalMeterConfigs(m.Body)
	if err != nil {
		return nil, fmt.Errorf("openflow: meter config reply: %w", err)
	}
	return s, nil
}

// MeterStats decodes a meter stats reply.
func (m *MultipartReply) MeterStats() ([]MeterStats, error) {
	if err := m.checkType(MultipartMeter); err != nil {
		return nil, err
	}
	s, err := unmarshalMeterStats(m.Body)
	if err != nil {
		return nil, fmt.Errorf("openflow: meter stats reply: %w", err)
	}
	return s, nil
}

// FlowUpdates decodes the updates of a flow monitor reply.
func (m *MultipartReply) FlowUpdates() ([]FlowUpdate, error) {
	if err := m.checkType(MultipartFlowMonitor); err != nil {
		return nil, err
	}
	if m.Version < Version14 {
		return nil, fmt.Errorf("openflow: flow monitor reply: %w", errVersion(m.Version))
	}
	u, err := unmarshalFlowUpdates(m.Body, m.Version)
	if err != nil {
		return nil, fmt.Errorf("openflow: flow monitor reply: %w", err)
	}
	return u, nil
}

// newReply builds a reply of type t from entries encoded by fn.
func newReply(v Version, t MultipartType, fn func(b []byte) ([]byte, error)) (*MultipartReply, error) {
	if !versionOK(v) {
		return nil, fmt.Errorf("openflow: %s reply: %w", t, errVersion(v))
	}
	body, err := fn(nil)
	if err != nil {
		return nil, fmt.Errorf("openflow: %s reply: %w", t, err)
	}
	return &MultipartReply{Version: v, Type: t, Body: body}, nil
}

// NewFlowStatsReply encodes flow stats entries as one reply (a switch's
// side; for tests and fakes).
func NewFlowStatsReply(v Version, stats []FlowStats) (*MultipartReply, error) {
	return newReply(v, MultipartFlow, func(b []byte) ([]byte, error) { return appendFlowStats(b, v, stats) })
}

// NewGroupDescReply encodes groups as one group desc reply.
func NewGroupDescReply(v Version, groups []GroupEntry) (*MultipartReply, error) {
	return newReply(v, MultipartGroupDesc, func(b []byte) ([]byte, error) { return appendGroupDescs(b, v, groups) })
}

// NewGroupStatsReply encodes group stats as one reply.
func NewGroupStatsReply(v Version, stats []GroupStats) (*MultipartReply, error) {
	return newReply(v, MultipartGroup, func(b []byte) ([]byte, error) { return appendGroupStats(b, stats) })
}

// NewPortDescReply encodes ports as one port desc reply.
func NewPortDescReply(v Version, ports []Port) (*MultipartReply, error) {
	return newReply(v, MultipartPortDesc, func(b []byte) ([]byte, error) {
		var err error
		for i := range ports {
			if b, err = ports[i].appendPort(b, v); err != nil {
				return b, fmt.Errorf("port %d: %w", i, err)
			}
		}
		return b, nil
	})
}

// NewMeterConfigReply encodes meters as one meter config reply.
func NewMeterConfigReply(v Version, meters []MeterEntry) (*MultipartReply, error) {
	return newReply(v, MultipartMeterConfig, func(b []byte) ([]byte, error) { return appendMeterConfigs(b, meters) })
}

// NewMeterStatsReply encodes meter stats as one reply.
func NewMeterStatsReply(v Version, stats []MeterStats) (*MultipartReply, error) {
	return newReply(v, MultipartMeter, func(b []byte) ([]byte, error) { return appendMeterStats(b, stats) })
}

// NewFlowMonitorReply encodes flow updates as one flow monitor reply
// (OF1.4 and later).
func NewFlowMonitorReply(v Version, updates []FlowUpdate) (*MultipartReply, error) {
	if v < Version14 {
		return nil, fmt.Errorf("openflow: flow monitor reply: %w", errVersion(v))
	}
	return newReply(v, MultipartFlowMonitor, func(b []byte) ([]byte, error) { return appendFlowUpdates(b, v, updates) })
}

// GroupDescRequest asks for the description of one group, or of every group
// with GroupAll. OF1.3 has no filter and always asks for every group.
//
// OF1.5 body:
//
//	4 bytes: group_id
//	4 bytes: pad
type GroupDescRequest struct {
	GroupID uint32
}

func (m *GroupDescRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) {
		return TypeMultipartRequest, b, fmt.Errorf("group desc request: %w", errVersion(v))
	}
	b = appendMultipartHeader(b, MultipartGroupDesc, 0)
	if v >= Version15 {
		b = binary.BigEndian.AppendUint32(b, m.GroupID)
		b = append(b, 0, 0, 0, 0)
	} else if m.GroupID != GroupAll {
		return TypeMultipartRequest, b, fmt.Errorf("group desc request: group %d: %s asks only for all groups: %w", m.GroupID, v, ErrUnsupported)
	}
	return TypeMultipartRequest, b, nil
}

// GroupStatsRequest asks for the counters of one group, or of every group
// with GroupAll.
//
//	4 bytes: group_id
//	4 bytes: pad
type GroupStatsRequest struct {
	GroupID uint32
}

func (m *GroupStatsRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) {
		return TypeMultipartRequest, b, fmt.Errorf("group stats request: %w", errVersion(v))
	}
	b = appendMultipartHeader(b, MultipartGroup, 0)
	b = binary.BigEndian.AppendUint32(b, m.GroupID)
	return TypeMultipartRequest, append(b, 0, 0, 0, 0), nil
}

// PortDescRequest asks for the description of one port, or of every port
// with PortAny. OF1.3 has no filter and always asks for every port.
//
// OF1.5 body:
//
//	4 bytes: port_no
//	4 bytes: pad
type PortDescRequest struct {
	PortNo uint32
}

func (m *PortDescRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) {
		return TypeMultipartRequest, b, fmt.Errorf("port desc request: %w", errVersion(v))
	}
	b = appendMultipartHeader(b, MultipartPortDesc, 0)
	if v >= Version15 {
		b = binary.BigEndian.AppendUint32(b, m.PortNo)
		b = append(b, 0, 0, 0, 0)
	} else if m.PortNo != PortAny {
		return TypeMultipartRequest, b, fmt.Errorf("port desc request: port %d: %s asks only for all ports: %w", m.PortNo, v, ErrUnsupported)
	}
	return TypeMultipartRequest, b, nil
}

// MeterAll is OFPM_ALL, "every meter", in meter requests and deletes.
const MeterAll uint32 = 0xffffffff

// MeterConfigRequest asks for the configuration of one meter, or of every
// meter with MeterAll.
//
//	4 bytes: meter_id
//	4 bytes: pad
type MeterConfigRequest struct {
	MeterID uint32
}

func (m *MeterConfigRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) {
		return TypeMultipartRequest, b, fmt.Errorf("meter config request: %w", errVersion(v))
	}
	b = appendMultipartHeader(b, MultipartMeterConfig, 0)
	b = binary.BigEndian.AppendUint32(b, m.MeterID)
	return TypeMultipartRequest, append(b, 0, 0, 0, 0), nil
}

// MeterStatsRequest asks for the counters of one meter, or of every meter
// with MeterAll.
//
//	4 bytes: meter_id
//	4 bytes: pad
type MeterStatsRequest struct {
	MeterID uint32
}

func (m *MeterStatsRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) {
		return TypeMultipartRequest, b, fmt.Errorf("meter stats request: %w", errVersion(v))
	}
	b = appendMultipartHeader(b, MultipartMeter, 0)
	b = binary.BigEndian.AppendUint32(b, m.MeterID)
	return TypeMultipartRequest, append(b, 0, 0, 0, 0), nil
}

func init() {
	registerType(TypeMultipartRequest, decodeMultipartRequest)
	registerType(TypeMultipartReply, decodeMultipartReply)
}

// ViewMultipartReply reads the multipart reply message msg (header
// included) in place: the result's Body is msg's memory, not a copy. For
// replies too big to copy twice, read with EachFlowStats.
func ViewMultipartReply(msg []byte) (*MultipartReply, error) {
	var h Header
	if err := h.UnmarshalBinary(msg); err != nil {
		return nil, err
	}
	if h.Type != TypeMultipartReply {
		return nil, fmt.Errorf("openflow: message type %d, want a multipart reply: %w", h.Type, ErrMalformed)
	}
	if int(h.Length) != len(msg) {
		return nil, fmt.Errorf("openflow multipart reply: length %d, have %d bytes: %w", h.Length, len(msg), ErrMalformed)
	}
	return viewMultipartBody(h, msg[HeaderLen:])
}
