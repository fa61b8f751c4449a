package nat

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// DefaultTable is the name of nodeflow's tables (one per family).
const DefaultTable = "nodeflow"

// HostPortsTable is the name of the tables of the hostPort feature's
// rules (agent/features/hostportfeature), programmed by an Applier of their own.
const HostPortsTable = "nodeflow-hostports"

// Names inside each table.
const (
	// MapName is the DNAT map.
	MapName = "services"
	// ChainName is the nat chain hooked at output.
	ChainName = "output"
)

// elementsPerMessage bounds the elements of one netlink message; a batch
// holds as many messages as it needs. The elements travel in one nested
// attribute, whose length is 16 bits: 512 IPv6 elements (about 70 bytes
// each) fit in it with room to spare, 1,024 do not.
const elementsPerMessage = 512

// Options configure an Applier.
type Options struct {
	// Table names the tables (DefaultTable when empty).
	Table string
	// NetNS is an open file descriptor of the network namespace to program;
	// 0 programs the caller's.
	NetNS int
}

// Applier programs a Ruleset into nftables over netlink. It remembers what
// it last applied: the first Apply (and any Apply after a failure) replaces
// both tables in one transaction; later ones add and delete map elements in
// one transaction. An Applier is not safe for concurrent use.
type Applier struct {
	opts    Options
	applied *Ruleset // what the kernel holds, as far as known; nil: unknown
}

// NewApplier returns an Applier; it does not touch the kernel.
func NewApplier(opts Options) *Applier {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	return &Applier{opts: opts}
}

// Table returns the name of the tables.
func (a *Applier) Table() string { return a.opts.Table }

// conn returns a netlink connection whose send buffer fits a batch of
// about elements elements.
func (a *Applier) conn(elements int) (*nftables.Conn, error) {
	size := 128*elements + 1<<16
	opts := []nftables.ConnOption{nftables.WithSockOptions(func(c *netlink.Conn) error {
		if size <= 1<<17 {
			return nil
		}
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			// SO_SNDBUFFORCE passes wmem_max (root); SO_SNDBUF is capped by it.
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size); serr != nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, size)
			}
			// An error's answer echoes the whole request it refuses.
			if rerr := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size); rerr != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, size)
			}
		}); err != nil {
			return err
		}
		return serr
	})}
	if a.opts.NetNS != 0 {
		opts = append(opts, nftables.WithNetNSFd(a.opts.NetNS))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("hostnat: netlink: %w", err)
	}
	return c, nil
}

// objects are one family's table, map and chain.
type objects struct {
	v6    bool
	table *nftables.Table
	set   *nftables.Set
	chain *nftables.Chain
}

func (a *Applier) objects(v6 bool) objects {
	o := objects{v6: v6, table: &nftables.Table{Name: a.opts.Table, Family: nftables.TableFamilyIPv4}}
	key := nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	val := nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)
	if v6 {
		o.table.Family = nftables.TableFamilyIPv6
		key = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)
		val = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetService)
	}
	o.set = &nftables.Set{Table: o.table, Name: MapName, IsMap: true, Concatenation: true, KeyType: key, DataType: val}
	accept := nftables.ChainPolicyAccept
	o.chain = &nftables.Chain{Name: ChainName, Table: o.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest, Policy: &accept}
	return o
}

// Registers, as nft allocates them for this rule: 1 (NFT_REG_1) is 16
// bytes; 9-10 (NFT_REG32_01, _02) follow a 4-byte address in it, 2
// (NFT_REG_2) and 13 (NFT_REG32_05) a 16-byte one.
const (
	regAddr     = 1
	regProto4   = 9
	regPort4    = 10
	regProto6   = 2
	regPort6    = 13
	ip4DaddrOff = 16 // IPv4 header: destination address
	ip6DaddrOff = 24 // IPv6 header: destination address
	thDportOff  = 2  // TCP, UDP, SCTP: destination port
)

// ruleExprs is the chain's one rule:
//
//	dnat ip to ip daddr . meta l4proto . th dport map @services
func (o objects) ruleExprs() []expr.Any {
	off, alen, proto, port, fam := uint32(ip4DaddrOff), uint32(4), uint32(regProto4), uint32(regPort4), uint32(unix.NFPROTO_IPV4)
	if o.v6 {
		off, alen, proto, port, fam = ip6DaddrOff, 16, regProto6, regPort6, unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Payload{DestRegister: regAddr, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: alen},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: proto},
		&expr.Payload{DestRegister: port, Base: expr.PayloadBaseTransportHeader, Offset: thDportOff, Len: 2},
		&expr.Lookup{SourceRegister: regAddr, DestRegister: regAddr, IsDestRegSet: true, SetName: o.set.Name, SetID: o.set.ID},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: regAddr, RegProtoMin: proto},
	}
}

func elements(rules []Rule) []nftables.SetElement {
	out := make([]nftables.SetElement, len(rules))
	for i, r := range rules {
		out[i] = nftables.SetElement{Key: encodeKey(r.Key), Val: encodeVal(r.To)}
	}
	return out
}

// addElements queues adds (or deletes) in messages of at most
// elementsPerMessage elements.
func addElements(c *nftables.Conn, s *nftables.Set, rules []Rule, del bool) error {
	for chunk := range slices.Chunk(rules, elementsPerMessage) {
		var err error
		if del {
			err = c.SetDeleteElements(s, elements(chunk))
		} else {
			err = c.SetAddElements(s, elements(chunk))
		}
		if err != nil {
			return fmt.Errorf("hostnat: %s %s map: %w", family(s.Table), s.Name, err)
		}
	}
	return nil
}

func family(t *nftables.Table) string {
	if t.Family == nftables.TableFamilyIPv6 {
		return "ip6"
	}
	return "ip"
}

// Replace replaces both tables with rs in one transaction: each table is
// added (so that deleting it cannot fail), deleted and built again, so the
// kernel switches from the old content to the new at once.
func (a *Applier) Replace(rs Ruleset) error {
	a.applied = nil
	c, err := a.conn(rs.Len())
	if err != nil {
		return err
	}
	for _, v6 := range []bool{false, true} {
		o := a.objects(v6)
		c.AddTable(o.table)
		c.DelTable(o.table)
		c.AddTable(o.table)
		if err := c.AddSet(o.set, nil); err != nil {
			return fmt.Errorf("hostnat: %s %s: map %s: %w", family(o.table), o.table.Name, o.set.Name, err)
		}
		c.AddChain(o.chain)
		c.AddRule(&nftables.Rule{Table: o.table, Chain: o.chain, Exprs: o.ruleExprs()})
		if err := addElements(c, o.set, rs.Family(v6), false); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("hostnat: replace tables %s (%d rules): %w", a.opts.Table, rs.Len(), err)
	}
	a.applied = &rs
	return nil
}

// Apply makes the tables hold rs. When the applier knows what they hold,
// it sends only the map elements that change, in one transaction;
// otherwise, or when that fails (someone deleted the table, say), it
// replaces the tables.
func (a *Applier) Apply(rs Ruleset) error {
	if a.applied == nil {
		return a.Replace(rs)
	}
	if a.applied.Equal(rs) {
		return nil
	}
	var n int
	type change struct {
		o        objects
		add, del []Rule
	}
	var changes []change
	for _, v6 := range []bool{false, true} {
		add, del := Diff(a.applied.Family(v6), rs.Family(v6))
		if len(add)+len(del) > 0 {
			changes = append(changes, change{o: a.objects(v6), add: add, del: del})
			n += len(add) + len(del)
		}
	}
	err := func() error {
		c, err := a.conn(n)
		if err != nil {
			return err
		}
		// A table deleted behind the applier's back (the other family's
		// too, whose elements may not change now) calls for a replace.
		if ok, err := a.present(c); err != nil {
			return err
		} else if !ok {
			return errTablesGone
		}
		for _, ch := range changes {
			if err := addElements(c, ch.o.set, ch.del, true); err != nil {
				return err
			}
			if err := addElements(c, ch.o.set, ch.add, false); err != nil {
				return err
			}
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("hostnat: update map %s (%d elements): %w", MapName, n, err)
		}
		return nil
	}()
	if err == nil {
		a.applied = &rs
		return nil
	}
	if rerr := a.Replace(rs); rerr != nil {
		if errors.Is(err, errTablesGone) {
			return rerr
		}
		return errors.Join(err, rerr)
	}
	return nil
}

// errTablesGone: a table the applier programmed is not there any more.
var errTablesGone = errors.New("hostnat: a table is missing")

// present reports whether both tables exist.
func (a *Applier) present(c *nftables.Conn) (bool, error) {
	ts, err := c.ListTables()
	if err != nil {
		return false, fmt.Errorf("hostnat: list tables: %w", err)
	}
	n := 0
	for _, t := range ts {
		if t.Name == a.opts.Table && (t.Family == nftables.TableFamilyIPv4 || t.Family == nftables.TableFamilyIPv6) {
			n++
		}
	}
	return n == 2, nil
}

// Delete removes both tables (nothing when they do not exist).
func (a *Applier) Delete() error {
	a.applied = nil
	c, err := a.conn(0)
	if err != nil {
		return err
	}
	for _, v6 := range []bool{false, true} {
		o := a.objects(v6)
		c.AddTable(o.table)
		c.DelTable(o.table)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("hostnat: delete tables %s: %w", a.opts.Table, err)
	}
	return nil
}

// Read returns the rules the kernel's maps hold, and whether the tables
// exist. A missing table reads as empty.
func (a *Applier) Read() (Ruleset, bool, error) {
	c, err := a.conn(0)
	if err != nil {
		return Ruleset{}, false, err
	}
	var rs Ruleset
	found := false
	for _, v6 := range []bool{false, true} {
		o := a.objects(v6)
		t, err := c.ListTableOfFamily(o.table.Name, o.table.Family)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT) {
				continue
			}
			return Ruleset{}, false, fmt.Errorf("hostnat: read %s %s: %w", family(o.table), o.table.Name, err)
		}
		found = true
		s, err := c.GetSetByName(t, MapName)
		if err != nil {
			return Ruleset{}, true, fmt.Errorf("hostnat: read %s %s: map %s: %w", family(o.table), o.table.Name, MapName, err)
		}
		els, err := c.GetSetElements(s)
		if err != nil {
			return Ruleset{}, true, fmt.Errorf("hostnat: read %s %s: elements of %s: %w", family(o.table), o.table.Name, MapName, err)
		}
		rules := make([]Rule, 0, len(els))
		for _, e := range els {
			r, err := decodeElement(v6, e.Key, e.Val)
			if err != nil {
				return Ruleset{}, true, err
			}
			rules = append(rules, r)
		}
		slices.SortFunc(rules, func(x, y Rule) int { return x.Key.compare(y.Key) })
		if v6 {
			rs.V6 = rules
		} else {
			rs.V4 = rules
		}
	}
	return rs, found, nil
}
