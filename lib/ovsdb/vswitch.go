package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
)

// ErrNotFound is wrapped by errors about a bridge or port that does not exist.
var ErrNotFound = errors.New("not found")

// Helpers for the Open_vSwitch database. Each helper that changes the
// database reads what it needs, then writes in ONE transaction that starts
// with "wait" operations asserting that what it read still holds. When
// another client changed those rows in between, the wait fails ("timed
// out") and the helper reads again and retries. When nothing needs to change
// no write is sent at all, so running a helper twice changes nothing.

// maxGuardRetries bounds how often a helper re-reads after losing a race.
const maxGuardRetries = 5

// Protocols every bridge nodeflow manages speaks.
var requiredProtocols = []string{"OpenFlow13", "OpenFlow15"}

// BridgeSpec is the desired state of a bridge.
type BridgeSpec struct {
	// Name of the bridge (and of its LOCAL internal port).
	Name string
	// DatapathType is "netdev" for the userspace datapath, "" for the
	// kernel (system) datapath.
	DatapathType string
	// FailMode is "secure" or "standalone"; "" means "secure".
	FailMode string
	// Protocols the bridge accepts; OpenFlow13 and OpenFlow15 are always added.
	Protocols []string
	// OtherConfig and ExternalIDs are merged into the bridge's maps: the keys
	// given are set, other keys are left alone.
	OtherConfig map[string]string
	ExternalIDs map[string]string
}

// PortSpec is the desired state of a port with one interface of the same name.
type PortSpec struct {
	// Name of the port and of its interface.
	Name string
	// Type of the interface: "" or "system" (a network device that exists),
	// "internal", "patch", "vxlan", "geneve", "dummy" (with ovs-vswitchd's
	// --enable-dummy), ...
	Type string
	// Options of the interface, set exactly (keys not given are removed):
	// "peer" for patch; "remote_ip", "key", "dst_port" for vxlan.
	Options map[string]string
	// ExternalIDs are merged into both the Port's and the Interface's
	// external_ids.
	ExternalIDs map[string]string
	// OfportRequest asks for a specific OpenFlow port number (1-65279);
	// 0 leaves it to ovs-vswitchd.
	OfportRequest int
	// MTURequest asks for an MTU; 0 leaves it alone.
	MTURequest int
}

// Validate checks the spec before it is sent.
func (s PortSpec) Validate() error {
	switch {
	case s.Name == "":
		return fmt.Errorf("name: empty")
	case s.Type == "patch" && s.Options["peer"] == "":
		return fmt.Errorf("options: patch port needs options:peer")
	case (s.Type == "vxlan" || s.Type == "geneve" || s.Type == "gre") && s.Options["remote_ip"] == "":
		return fmt.Errorf("options: %s port needs options:remote_ip (an address or \"flow\")", s.Type)
	case s.OfportRequest < 0 || s.OfportRequest > 65279:
		return fmt.Errorf("ofport_request: %d out of range 1-65279", s.OfportRequest)
	case s.MTURequest < 0:
		return fmt.Errorf("mtu_request: %d is negative", s.MTURequest)
	}
	return nil
}

// PortInfo describes a port of a bridge.
type PortInfo struct {
	Name string
	UUID UUID
	// Ofport, Type and Error come from the interface named like the port
	// (or its first interface).
	Ofport int64
	Type   string
	Error  string
	// ExternalIDs of the Port row, and of its interface.
	ExternalIDs          map[string]string
	InterfaceExternalIDs map[string]string
	// Interfaces of the port (one, except for bonds).
	Interfaces []Interface
}

// guarded runs plan until its write transaction goes through. plan returns
// the operations to run (nil when nothing needs to change).
func (c *Client) guarded(ctx context.Context, label string, plan func() ([]Operation, error)) ([]OpResult, error) {
	var lastErr error
	for attempt := 0; attempt < maxGuardRetries; attempt++ {
		ops, err := plan()
		if err != nil {
			return nil, err
		}
		if len(ops) == 0 {
			return nil, nil
		}
		res, err := c.transact(ctx, DatabaseName, label, ops)
		var oe *OpError
		if errors.As(err, &oe) && oe.Op == "wait" && oe.Err == ErrStrTimedOut {
			lastErr = err
			continue // someone else changed the rows we read; read again
		}
		return res, err
	}
	return nil, wrap(lastErr, fmt.Sprintf("%s: gave up after %d concurrent changes", label, maxGuardRetries))
}

// read runs a read-only transaction.
func (c *Client) read(ctx context.Context, label string, ops ...Operation) ([]OpResult, error) {
	return c.transact(ctx, DatabaseName, label+" (read)", ops)
}

// guard is a wait that fails at once unless the row with uuid still has the
// given values in the given columns.
func guard(table string, uuid UUID, current Row, columns []string) Operation {
	row := make(Row, len(columns))
	for _, col := range columns {
		row[col] = current[col]
	}
	return Wait(table, []Condition{Equal("_uuid", uuid)}, columns, "==", []Row{row}, 0)
}

// guardAbsent is a wait that fails at once if a row named name exists.
func guardAbsent(table, name string) Operation {
	return Wait(table, []Condition{Equal("name", name)}, []string{"name"}, "==", nil, 0)
}

// one returns the single row of a select result, or nil.
func one(res OpResult, what string) (Row, error) {
	switch len(res.Rows) {
	case 0:
		return nil, nil
	case 1:
		return res.Rows[0], nil
	}
	return nil, fmt.Errorf("%d rows for %s", len(res.Rows), what)
}

// mergedMap returns current with the keys of set applied, and whether that
// changes anything.
func mergedMap(current, set map[string]string) (map[string]string, bool) {
	out := maps.Clone(current)
	if out == nil {
		out = map[string]string{}
	}
	changed := false
	for k, v := range set {
		if old, ok := out[k]; !ok || old != v {
			out[k] = v
			changed = true
		}
	}
	return out, changed
}

// sameStrings compares two string sets.
func sameStrings(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}

var bridgeColumns = []string{"_uuid", "name", "ports", "datapath_type", "fail_mode", "protocols", "other_config", "external_ids"}

// EnsureBridge creates the bridge if it is missing (with its LOCAL internal
// port, and adds it to Open_vSwitch.bridges), or fixes the columns of spec
// that differ. It makes one write transaction, or none when the bridge is
// already as specified.
func (c *Client) EnsureBridge(ctx context.Context, spec BridgeSpec) error {
	label := "ensure bridge " + spec.Name
	if spec.Name == "" {
		return fmt.Errorf("ovsdb: %s: name: empty", label)
	}
	failMode := spec.FailMode
	if failMode == "" {
		failMode = "secure"
	}
	protocols := MakeStringSet(append(slices.Clone(spec.Protocols), requiredProtocols...)...)
	_, err := c.guarded(ctx, label, func() ([]Operation, error) {
		res, err := c.read(ctx, label,
			Select(TableBridge, []Condition{Equal("name", spec.Name)}, bridgeColumns...),
			Select(TableOpenvSwitch, nil, "_uuid", "bridges"))
		if err != nil {
			return nil, err
		}
		if len(res[1].Rows) != 1 {
			return nil, fmt.Errorf("ovsdb: %s: %d Open_vSwitch rows (database not initialised?)", label, len(res[1].Rows))
		}
		ovs, err := OpenvSwitchFromRow("", res[1].Rows[0])
		if err != nil {
			return nil, wrap(err, label)
		}
		cur, err := one(res[0], "bridge "+spec.Name)
		if err != nil {
			return nil, wrap(err, label)
		}
		if cur == nil {
			bridgeRow := Row{
				"name":          spec.Name,
				"ports":         MakeUUIDSet(NamedUUID("localport")),
				"datapath_type": spec.DatapathType,
				"fail_mode":     failMode,
				"protocols":     protocols,
				"other_config":  MakeStringMap(spec.OtherConfig),
				"external_ids":  MakeStringMap(spec.ExternalIDs),
			}
			return []Operation{
				guardAbsent(TableBridge, spec.Name),
				Insert(TableInterface, Row{"name": spec.Name, "type": "internal"}, "localiface"),
				Insert(TablePort, Row{"name": spec.Name, "interfaces": MakeUUIDSet(NamedUUID("localiface"))}, "localport"),
				Insert(TableBridge, bridgeRow, "bridge"),
				Mutate(TableOpenvSwitch, []Condition{Equal("_uuid", ovs.UUID)},
					InsertMutation("bridges", MakeUUIDSet(NamedUUID("bridge")))),
			}, nil
		}
		br, err := BridgeFromRow("", cur)
		if err != nil {
			return nil, wrap(err, label)
		}
		update := Row{}
		if br.DatapathType != spec.DatapathType {
			update["datapath_type"] = spec.DatapathType
		}
		if br.FailMode != failMode {
			update["fail_mode"] = failMode
		}
		want, _ := StringSet(protocols)
		if !sameStrings(br.Protocols, want) {
			update["protocols"] = protocols
		}
		if m, changed := mergedMap(br.OtherConfig, spec.OtherConfig); changed {
			update["other_config"] = MakeStringMap(m)
		}
		if m, changed := mergedMap(br.ExternalIDs, spec.ExternalIDs); changed {
			update["external_ids"] = MakeStringMap(m)
		}
		if len(update) == 0 {
			return nil, nil
		}
		cols := slices.Sorted(maps.Keys(update))
		where := []Condition{Equal("_uuid", br.UUID)}
		return []Operation{
			guard(TableBridge, br.UUID, cur, cols),
			Update(TableBridge, where, update),
		}, nil
	})
	return err
}

// EnsurePort creates the port and its interface on bridge if missing, or
// fixes the columns of spec that differ. It makes one write transaction, or
// none when the port is already as specified. A port of that name on another
// bridge is an error.
func (c *Client) EnsurePort(ctx context.Context, bridge string, spec PortSpec) error {
	label := fmt.Sprintf("ensure port %s on %s", spec.Name, bridge)
	if err := spec.Validate(); err != nil {
		return wrap(err, label)
	}
	_, err := c.guarded(ctx, label, func() ([]Operation, error) {
		res, err := c.read(ctx, label,
			Select(TableBridge, []Condition{Equal("name", bridge)}, "_uuid", "ports"),
			Select(TablePort, []Condition{Equal("name", spec.Name)}, "_uuid", "interfaces", "external_ids"),
			Select(TableInterface, []Condition{Equal("name", spec.Name)},
				"_uuid", "type", "options", "external_ids", "ofport_request", "mtu_request"))
		if err != nil {
			return nil, err
		}
		brRow, err := one(res[0], "bridge "+bridge)
		if err != nil {
			return nil, wrap(err, label)
		}
		if brRow == nil {
			return nil, fmt.Errorf("ovsdb: %s: bridge %s: %w", label, bridge, ErrNotFound)
		}
		br, err := BridgeFromRow("", brRow)
		if err != nil {
			return nil, wrap(err, label)
		}
		portRow, err := one(res[1], "port "+spec.Name)
		if err != nil {
			return nil, wrap(err, label)
		}
		ifaceRow, err := one(res[2], "interface "+spec.Name)
		if err != nil {
			return nil, wrap(err, label)
		}
		ofportReq := OptionalIntegerValue(int64(spec.OfportRequest), spec.OfportRequest > 0)
		mtuReq := OptionalIntegerValue(int64(spec.MTURequest), spec.MTURequest > 0)
		if portRow == nil {
			if ifaceRow != nil {
				return nil, fmt.Errorf("ovsdb: %s: interface %s already exists in another port", label, spec.Name)
			}
			ifaceRow := Row{
				"name":           spec.Name,
				"type":           spec.Type,
				"options":        MakeStringMap(spec.Options),
				"external_ids":   MakeStringMap(spec.ExternalIDs),
				"ofport_request": ofportReq,
			}
			if spec.MTURequest > 0 {
				ifaceRow["mtu_request"] = mtuReq
			}
			return []Operation{
				guardAbsent(TablePort, spec.Name),
				Insert(TableInterface, ifaceRow, "iface"),
				Insert(TablePort, Row{
					"name":         spec.Name,
					"interfaces":   MakeUUIDSet(NamedUUID("iface")),
					"external_ids": MakeStringMap(spec.ExternalIDs),
				}, "port"),
				Mutate(TableBridge, []Condition{Equal("_uuid", br.UUID)},
					InsertMutation("ports", MakeUUIDSet(NamedUUID("port")))),
			}, nil
		}
		port, err := PortFromRow("", portRow)
		if err != nil {
			return nil, wrap(err, label)
		}
		if !slices.Contains(br.Ports, port.UUID) {
			return nil, fmt.Errorf("ovsdb: %s: port %s exists on another bridge", label, spec.Name)
		}
		if ifaceRow == nil || len(port.Interfaces) != 1 {
			return nil, fmt.Errorf("ovsdb: %s: port %s has %d interfaces, not just the interface %s", label, spec.Name, len(port.Interfaces), spec.Name)
		}
		iface, err := InterfaceFromRow("", ifaceRow)
		if err != nil {
			return nil, wrap(err, label)
		}
		if port.Interfaces[0] != iface.UUID {
			return nil, fmt.Errorf("ovsdb: %s: port %s's interface is not the interface named %s", label, spec.Name, spec.Name)
		}
		var ops []Operation
		ifUpdate := Row{}
		if iface.Type != spec.Type {
			ifUpdate["type"] = spec.Type
		}
		if !maps.Equal(iface.Options, spec.Options) {
			ifUpdate["options"] = MakeStringMap(spec.Options)
		}
		if m, changed := mergedMap(iface.ExternalIDs, spec.ExternalIDs); changed {
			ifUpdate["external_ids"] = MakeStringMap(m)
		}
		if iface.OfportRequest != int64(spec.OfportRequest) {
			ifUpdate["ofport_request"] = ofportReq
		}
		if spec.MTURequest > 0 && iface.MTURequest != int64(spec.MTURequest) {
			ifUpdate["mtu_request"] = mtuReq
		}
		if len(ifUpdate) > 0 {
			cols := slices.Sorted(maps.Keys(ifUpdate))
			ops = append(ops,
				guard(TableInterface, iface.UUID, ifaceRow, cols),
				Update(TableInterface, []Condition{Equal("_uuid", iface.UUID)}, ifUpdate))
		}
		if m, changed := mergedMap(port.ExternalIDs, spec.ExternalIDs); changed {
			ops = append(ops,
				guard(TablePort, port.UUID, portRow, []string{"external_ids"}),
				Update(TablePort, []Condition{Equal("_uuid", port.UUID)}, Row{"external_ids": MakeStringMap(m)}))
		}
		return ops, nil
	})
	return err
}

// DeletePort removes the port (and so its interface) from bridge. A missing
// port or bridge is not an error; a port of that name on another bridge is.
func (c *Client) DeletePort(ctx context.Context, bridge, name string) error {
	label := fmt.Sprintf("delete port %s from %s", name, bridge)
	_, err := c.guarded(ctx, label, func() ([]Operation, error) {
		res, err := c.read(ctx, label,
			Select(TableBridge, []Condition{Equal("name", bridge)}, "_uuid", "ports"),
			Select(TablePort, []Condition{Equal("name", name)}, "_uuid"))
		if err != nil {
			return nil, err
		}
		if len(res[1].Rows) == 0 {
			return nil, nil
		}
		port, err := PortFromRow("", res[1].Rows[0])
		if err != nil {
			return nil, wrap(err, label)
		}
		var br Bridge
		if len(res[0].Rows) == 1 {
			if br, err = BridgeFromRow("", res[0].Rows[0]); err != nil {
				return nil, wrap(err, label)
			}
		}
		if !slices.Contains(br.Ports, port.UUID) {
			return nil, fmt.Errorf("ovsdb: %s: port %s is not on bridge %s", label, name, bridge)
		}
		// Port and Interface are not root tables: dropping the reference
		// deletes both.
		return []Operation{
			Mutate(TableBridge, []Condition{Equal("_uuid", br.UUID)},
				DeleteMutation("ports", MakeUUIDSet(port.UUID))),
		}, nil
	})
	return err
}

// ListPorts lists the ports of bridge, sorted by name.
func (c *Client) ListPorts(ctx context.Context, bridge string) ([]PortInfo, error) {
	label := "list ports of " + bridge
	res, err := c.read(ctx, label,
		Select(TableBridge, []Condition{Equal("name", bridge)}, "_uuid", "ports"),
		Select(TablePort, nil, "_uuid", "name", "interfaces", "external_ids"),
		Select(TableInterface, nil, "_uuid", "name", "type", "ofport", "error", "external_ids", "options"))
	if err != nil {
		return nil, err
	}
	br, err := theBridge(res[0], label, bridge)
	if err != nil {
		return nil, err
	}
	ports := make(map[UUID]Port, len(res[1].Rows))
	for _, r := range res[1].Rows {
		p, err := PortFromRow("", r)
		if err != nil {
			return nil, wrap(err, label)
		}
		ports[p.UUID] = p
	}
	ifaces := make(map[UUID]Interface, len(res[2].Rows))
	for _, r := range res[2].Rows {
		i, err := InterfaceFromRow("", r)
		if err != nil {
			return nil, wrap(err, label)
		}
		ifaces[i.UUID] = i
	}
	out := make([]PortInfo, 0, len(br.Ports))
	for _, pu := range br.Ports {
		p, ok := ports[pu]
		if !ok {
			continue
		}
		info := PortInfo{Name: p.Name, UUID: p.UUID, ExternalIDs: p.ExternalIDs}
		for _, iu := range p.Interfaces {
			if i, ok := ifaces[iu]; ok {
				info.Interfaces = append(info.Interfaces, i)
			}
		}
		sort.Slice(info.Interfaces, func(a, b int) bool { return info.Interfaces[a].Name < info.Interfaces[b].Name })
		if len(info.Interfaces) > 0 {
			main := info.Interfaces[0]
			for _, i := range info.Interfaces {
				if i.Name == p.Name {
					main = i
				}
			}
			info.Ofport, info.Type, info.Error, info.InterfaceExternalIDs = main.Ofport, main.Type, main.Error, main.ExternalIDs
		}
		out = append(out, info)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// theBridge converts the one row of a select of bridge by name; a missing
// bridge is ErrNotFound.
func theBridge(res OpResult, label, bridge string) (Bridge, error) {
	if len(res.Rows) != 1 {
		return Bridge{}, fmt.Errorf("ovsdb: %s: bridge %s: %w", label, bridge, ErrNotFound)
	}
	br, err := BridgeFromRow("", res.Rows[0])
	if err != nil {
		return Bridge{}, wrap(err, label)
	}
	return br, nil
}

// BridgeExternalIDs returns the external_ids of bridge.
func (c *Client) BridgeExternalIDs(ctx context.Context, bridge string) (map[string]string, error) {
	label := "bridge external ids of " + bridge
	res, err := c.read(ctx, label, Select(TableBridge, []Condition{Equal("name", bridge)}, "external_ids"))
	if err != nil {
		return nil, err
	}
	br, err := theBridge(res[0], label, bridge)
	if err != nil {
		return nil, err
	}
	return br.ExternalIDs, nil
}

// SetBridgeExternalIDs merges ids into the external_ids of bridge: each key
// given is set to its value, other keys are left alone. It is one mutate,
// which the server treats as no change when the values are already there.
func (c *Client) SetBridgeExternalIDs(ctx context.Context, bridge string, ids map[string]string) error {
	label := "set bridge external ids of " + bridge
	if len(ids) == 0 {
		return nil
	}
	keys := make([]string, 0, len(ids))
	for k := range ids {
		keys = append(keys, k)
	}
	res, err := c.transact(ctx, DatabaseName, label, []Operation{
		Mutate(TableBridge, []Condition{Equal("name", bridge)},
			DeleteMutation("external_ids", MakeStringSet(keys...)),
			InsertMutation("external_ids", MakeStringMap(ids))),
	})
	if err != nil {
		return err
	}
	if res[0].Count == 0 {
		return fmt.Errorf("ovsdb: %s: bridge %s: %w", label, bridge, ErrNotFound)
	}
	return nil
}

// Switch returns the Open_vSwitch table's one row: the switch's version,
// its datapath and interface types, its configuration sequence numbers.
func (c *Client) Switch(ctx context.Context) (OpenvSwitch, error) {
	const label = "the Open_vSwitch row"
	res, err := c.read(ctx, label, Select(TableOpenvSwitch, nil))
	if err != nil {
		return OpenvSwitch{}, err
	}
	if len(res[0].Rows) != 1 {
		return OpenvSwitch{}, fmt.Errorf("ovsdb: %s: %d Open_vSwitch rows (database not initialised?)", label, len(res[0].Rows))
	}
	o, err := OpenvSwitchFromRow("", res[0].Rows[0])
	if err != nil {
		return OpenvSwitch{}, wrap(err, label)
	}
	return o, nil
}
