package ovsdb

import (
	"fmt"
	"maps"
)

// Table and database names of the Open_vSwitch schema.
const (
	// DatabaseName is the Open vSwitch configuration database.
	DatabaseName = "Open_vSwitch"
	// TableOpenvSwitch is the root table (one row).
	TableOpenvSwitch = "Open_vSwitch"
	// TableBridge holds bridges.
	TableBridge = "Bridge"
	// TablePort holds ports; each belongs to one bridge.
	TablePort = "Port"
	// TableInterface holds interfaces; each belongs to one port.
	TableInterface = "Interface"
	// TableController holds OpenFlow controller targets of bridges.
	TableController = "Controller"
)

// OpenvSwitch is the typed form of the columns nodeflow reads from the
// Open_vSwitch table. Columns not read are left zero.
type OpenvSwitch struct {
	UUID          UUID
	Bridges       []UUID
	ExternalIDs   map[string]string
	OtherConfig   map[string]string
	OVSVersion    string
	DBVersion     string
	NextCfg       int64
	CurCfg        int64
	DatapathTypes []string
	IfaceTypes    []string
}

// Bridge is the typed form of the Bridge columns nodeflow uses.
type Bridge struct {
	UUID         UUID
	Name         string
	Ports        []UUID
	Controller   []UUID
	DatapathType string
	// FailMode is "standalone", "secure" or "" (unset).
	FailMode    string
	Protocols   []string
	OtherConfig map[string]string
	ExternalIDs map[string]string
	// DatapathID is the bridge's OpenFlow datapath id as 16 hex digits, once
	// ovs-vswitchd has set it.
	DatapathID string
}

// Port is the typed form of the Port columns nodeflow uses.
type Port struct {
	UUID        UUID
	Name        string
	Interfaces  []UUID
	ExternalIDs map[string]string
	OtherConfig map[string]string
	// Tag is the access VLAN, 0 when unset.
	Tag int64
}

// Interface is the typed form of the Interface columns nodeflow uses.
type Interface struct {
	UUID    UUID
	Name    string
	Type    string
	Options map[string]string
	// Ofport is the OpenFlow port number: 0 while ovs-vswitchd has not
	// assigned one yet, -1 when the interface could not be created (see Error).
	Ofport int64
	// OfportRequest is the requested OpenFlow port number, 0 when unset.
	OfportRequest int64
	// MTURequest is the requested MTU, 0 when unset.
	MTURequest int64
	// MTU is the current MTU, 0 when unknown.
	MTU int64
	// Error is ovs-vswitchd's explanation of a failure, "" when none.
	Error       string
	MACInUse    string
	IfIndex     int64
	LinkState   string
	AdminState  string
	ExternalIDs map[string]string
	OtherConfig map[string]string
}

// clone returns a copy of i that shares no maps with it.
func (i *Interface) clone() *Interface {
	c := *i
	c.Options = maps.Clone(i.Options)
	c.ExternalIDs = maps.Clone(i.ExternalIDs)
	c.OtherConfig = maps.Clone(i.OtherConfig)
	return &c
}

// Controller is the typed form of the Controller columns nodeflow uses.
type Controller struct {
	UUID        UUID
	Target      string
	IsConnected bool
	Role        string
	ExternalIDs map[string]string
	OtherConfig map[string]string
}

// rowDecoder converts the columns of one row, keeping the first error with
// the table, row and column in it.
type rowDecoder struct {
	table string
	uuid  UUID
	row   Row
	err   error
}

func newRowDecoder(table string, uuid UUID, row Row) *rowDecoder {
	d := &rowDecoder{table: table, uuid: uuid, row: row}
	if uuid == "" {
		if v, ok := row["_uuid"]; ok {
			u, isUUID := v.(UUID)
			if !isUUID {
				d.err = fmt.Errorf("ovsdb: %s row: column _uuid: %w: want a uuid, got %s", table, ErrMalformed, kindOf(v))
			}
			d.uuid = u
		}
	}
	return d
}

// col runs conv on column c when the row has it.
func (d *rowDecoder) col(c string, conv func(v any) error) {
	if d.err != nil {
		return
	}
	v, ok := d.row[c]
	if !ok {
		return
	}
	if err := conv(v); err != nil {
		d.err = fmt.Errorf("ovsdb: %s row %s: column %s: %w", d.table, d.uuid, c, err)
	}
}

func (d *rowDecoder) str(c string, dst *string) {
	d.col(c, func(v any) (err error) { *dst, err = String(v); return })
}

func (d *rowDecoder) optStr(c string, dst *string) {
	d.col(c, func(v any) (err error) { *dst, err = OptionalString(v); return })
}

func (d *rowDecoder) integer(c string, dst *int64) {
	d.col(c, func(v any) (err error) { *dst, err = Integer(v); return })
}

func (d *rowDecoder) optInt(c string, dst *int64) {
	d.col(c, func(v any) (err error) { *dst, _, err = OptionalInteger(v); return })
}

func (d *rowDecoder) boolean(c string, dst *bool) {
	d.col(c, func(v any) (err error) { *dst, err = Boolean(v); return })
}

func (d *rowDecoder) strSet(c string, dst *[]string) {
	d.col(c, func(v any) (err error) { *dst, err = StringSet(v); return })
}

func (d *rowDecoder) uuidSet(c string, dst *[]UUID) {
	d.col(c, func(v any) (err error) { *dst, err = UUIDSet(v); return })
}

func (d *rowDecoder) strMap(c string, dst *map[string]string) {
	d.col(c, func(v any) (err error) { *dst, err = StringMap(v); return })
}

// OpenvSwitchFromRow converts an Open_vSwitch row. When uuid is "" it is
// taken from the row's _uuid column, if present. Missing columns stay zero.
func OpenvSwitchFromRow(uuid UUID, row Row) (OpenvSwitch, error) {
	d := newRowDecoder(TableOpenvSwitch, uuid, row)
	o := OpenvSwitch{UUID: d.uuid}
	d.uuidSet("bridges", &o.Bridges)
	d.strMap("external_ids", &o.ExternalIDs)
	d.strMap("other_config", &o.OtherConfig)
	d.optStr("ovs_version", &o.OVSVersion)
	d.optStr("db_version", &o.DBVersion)
	d.integer("next_cfg", &o.NextCfg)
	d.integer("cur_cfg", &o.CurCfg)
	d.strSet("datapath_types", &o.DatapathTypes)
	d.strSet("iface_types", &o.IfaceTypes)
	return o, d.err
}

// BridgeFromRow converts a Bridge row (see OpenvSwitchFromRow for uuid).
func BridgeFromRow(uuid UUID, row Row) (Bridge, error) {
	d := newRowDecoder(TableBridge, uuid, row)
	b := Bridge{UUID: d.uuid}
	d.str("name", &b.Name)
	d.uuidSet("ports", &b.Ports)
	d.uuidSet("controller", &b.Controller)
	d.str("datapath_type", &b.DatapathType)
	d.optStr("fail_mode", &b.FailMode)
	d.strSet("protocols", &b.Protocols)
	d.strMap("other_config", &b.OtherConfig)
	d.strMap("external_ids", &b.ExternalIDs)
	d.optStr("datapath_id", &b.DatapathID)
	return b, d.err
}

// PortFromRow converts a Port row (see OpenvSwitchFromRow for uuid).
func PortFromRow(uuid UUID, row Row) (Port, error) {
	d := newRowDecoder(TablePort, uuid, row)
	p := Port{UUID: d.uuid}
	d.str("name", &p.Name)
	d.uuidSet("interfaces", &p.Interfaces)
	d.strMap("external_ids", &p.ExternalIDs)
	d.strMap("other_config", &p.OtherConfig)
	d.optInt("tag", &p.Tag)
	return p, d.err
}

// InterfaceFromRow converts an Interface row (see OpenvSwitchFromRow for uuid).
func InterfaceFromRow(uuid UUID, row Row) (Interface, error) {
	d := newRowDecoder(TableInterface, uuid, row)
	i := Interface{UUID: d.uuid}
	d.str("name", &i.Name)
	d.str("type", &i.Type)
	d.strMap("options", &i.Options)
	d.optInt("ofport", &i.Ofport)
	d.optInt("ofport_request", &i.OfportRequest)
	d.optInt("mtu_request", &i.MTURequest)
	d.optInt("mtu", &i.MTU)
	d.optStr("error", &i.Error)
	d.optStr("mac_in_use", &i.MACInUse)
	d.optInt("ifindex", &i.IfIndex)
	d.optStr("link_state", &i.LinkState)
	d.optStr("admin_state", &i.AdminState)
	d.strMap("external_ids", &i.ExternalIDs)
	d.strMap("other_config", &i.OtherConfig)
	return i, d.err
}

// ControllerFromRow converts a Controller row (see OpenvSwitchFromRow for uuid).
func ControllerFromRow(uuid UUID, row Row) (Controller, error) {
	d := newRowDecoder(TableController, uuid, row)
	c := Controller{UUID: d.uuid}
	d.str("target", &c.Target)
	d.boolean("is_connected", &c.IsConnected)
	d.optStr("role", &c.Role)
	d.strMap("external_ids", &c.ExternalIDs)
	d.strMap("other_config", &c.OtherConfig)
	return c, d.err
}

// InterfaceColumns are the Interface columns InterfaceFromRow reads; the
// Interface cache monitors exactly these.
var InterfaceColumns = []string{
	"name", "type", "options", "ofport", "ofport_request", "mtu_request", "mtu",
	"error", "mac_in_use", "ifindex", "link_state", "admin_state", "external_ids", "other_config",
}
