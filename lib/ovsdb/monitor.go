package ovsdb

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"
)

// MonitorRequest says what to monitor in one table (RFC 7047 section 4.1.5).
type MonitorRequest struct {
	// Columns to monitor; empty means all.
	Columns []string
	// Select chooses which kinds of change are reported; nil means all.
	Select *MonitorSelect
}

// MonitorSelect chooses the kinds of change a monitor reports.
type MonitorSelect struct {
	Initial, Insert, Delete, Modify bool
}

// RowUpdate is the change of one row: Old is nil for a new row, New is nil
// for a deleted row. In a modification Old holds only the columns that
// changed (their previous values) and New holds every monitored column.
type RowUpdate struct {
	Old Row
	New Row
}

// TableUpdates maps table name to the changed rows of that table, by uuid.
type TableUpdates map[string]map[UUID]RowUpdate

// MonitorUpdate is what a monitor hands its handler.
type MonitorUpdate struct {
	// Snapshot is true when Tables holds the complete current contents of the
	// monitored tables (New only): the first update, and the first one after
	// every reconnection. Rows that the previous state had and a snapshot
	// lacks were deleted while the client was disconnected.
	Snapshot bool
	Tables   TableUpdates
}

// DecodeTableUpdates decodes a <table-updates> object:
//
//	{"<table>": {"<uuid>": {"old": <row>, "new": <row>}, ...}, ...}
//
// The result keeps no reference to b.
func DecodeTableUpdates(b []byte) (TableUpdates, error) {
	tu, err := decodeTableUpdates(b)
	if err != nil {
		return nil, fmt.Errorf("ovsdb: table updates: %w", err)
	}
	return tu, nil
}

func decodeTableUpdates(b []byte) (TableUpdates, error) {
	raw, err := decodeJSON(b)
	if err != nil {
		return nil, err
	}
	tables, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: want an object, got %s", ErrMalformed, jsonKind(raw))
	}
	out := make(TableUpdates, len(tables))
	for table, rt := range tables {
		rows, ok := rt.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("table %s: %w: want an object, got %s", table, ErrMalformed, jsonKind(rt))
		}
		tu := make(map[UUID]RowUpdate, len(rows))
		for id, rr := range rows {
			if !ValidUUID(id) {
				return nil, fmt.Errorf("table %s: %w: row key %q is not a uuid", table, ErrMalformed, id)
			}
			ru, ok := rr.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s row %s: %w: want an object, got %s", table, id, ErrMalformed, jsonKind(rr))
			}
			var u RowUpdate
			for k, v := range ru {
				var dst *Row
				switch k {
				case "old":
					dst = &u.Old
				case "new":
					dst = &u.New
				default:
					return nil, fmt.Errorf("%s row %s: %w: unknown member %q", table, id, ErrMalformed, k)
				}
				row, err := rowFromJSON(v)
				if err != nil {
					return nil, fmt.Errorf("%s row %s %s: %w", table, id, k, err)
				}
				*dst = row
			}
			if u.Old == nil && u.New == nil {
				return nil, fmt.Errorf("%s row %s: %w: neither old nor new", table, id, ErrMalformed)
			}
			tu[UUID(id)] = u
		}
		out[table] = tu
	}
	return out, nil
}

// MarshalJSON encodes t as a <table-updates> object, keys sorted.
func (t TableUpdates) MarshalJSON() ([]byte, error) {
	tables := make([]string, 0, len(t))
	for k := range t {
		tables = append(tables, k)
	}
	sort.Strings(tables)
	b := []byte{'{'}
	for i, table := range tables {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, table)
		b = append(b, ":{"...)
		ids := make([]string, 0, len(t[table]))
		for id := range t[table] {
			ids = append(ids, string(id))
		}
		sort.Strings(ids)
		for j, id := range ids {
			if j > 0 {
				b = append(b, ',')
			}
			u := t[table][UUID(id)]
			b = appendJSONString(b, id)
			b = append(b, ":{"...)
			var err error
			sep := false
			if u.Old != nil {
				b = append(b, `"old":`...)
				if b, err = appendRow(b, u.Old); err != nil {
					return nil, fmt.Errorf("ovsdb: %s row %s old: %w", table, id, err)
				}
				sep = true
			}
			if u.New != nil {
				if sep {
					b = append(b, ',')
				}
				b = append(b, `"new":`...)
				if b, err = appendRow(b, u.New); err != nil {
					return nil, fmt.Errorf("ovsdb: %s row %s new: %w", table, id, err)
				}
			}
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// Monitor is a running monitor. Its handler sees every update in order, on
// one goroutine of its own.
type Monitor struct {
	c       *Client
	id      string
	db      string
	params  []byte // [db, id, requests]
	handler func(MonitorUpdate)

	qmu      sync.Mutex
	queue    []MonitorUpdate
	stopped  bool
	wake     chan struct{}
	stopCh   chan struct{}
	done     chan struct{}
	firstCh  chan struct{} // closed after the handler returned from the first snapshot
	firstSet bool
}

// Monitor starts monitoring tables of database db. handler is called with a
// snapshot first (MonitorUpdate.Snapshot), then with every change, and with a new
// snapshot after each reconnection. Monitor returns once the handler has
// processed the first snapshot. The handler runs on its own goroutine and
// may call the client.
func (c *Client) Monitor(ctx context.Context, db string, tables map[string]MonitorRequest, handler func(MonitorUpdate)) (*Monitor, error) {
	c.mu.Lock()
	c.monSeq++
	id := "nodeflow-" + strconv.FormatUint(c.monSeq, 10)
	c.mu.Unlock()
	params, err := monitorParams(db, id, tables)
	if err != nil {
		return nil, wrap(err, "monitor "+db)
	}
	m := &Monitor{
		c: c, id: id, db: db, params: params, handler: handler,
		wake: make(chan struct{}, 1), stopCh: make(chan struct{}), done: make(chan struct{}),
		firstCh: make(chan struct{}),
	}
	go m.dispatch()
	for {
		conn, err := c.getConn(ctx)
		if err != nil {
			m.stop()
			return nil, wrap(err, "monitor "+db)
		}
		c.monMu.Lock()
		if !c.onCurrent(conn, func() { c.monitors[id] = m }) {
			c.monMu.Unlock()
			continue
		}
		err = m.start(ctx, conn)
		if err != nil {
			c.mu.Lock()
			delete(c.monitors, id)
			c.mu.Unlock()
		}
		c.monMu.Unlock()
		if err == nil {
			break
		}
		if isDisconnect(err) && ctx.Err() == nil {
			continue // try again on the next connection
		}
		m.stop()
		return nil, wrap(err, "monitor "+db)
	}
	select {
	case <-m.firstCh:
		return m, nil
	case <-ctx.Done():
		_ = m.Cancel(context.Background())
		return nil, fmt.Errorf("ovsdb: monitor %s: waiting for the first snapshot: %w", db, ctx.Err())
	}
}

// monitorParams encodes [db, id, {table: request}].
func monitorParams(db, id string, tables map[string]MonitorRequest) ([]byte, error) {
	type wireSelect struct {
		Initial bool `json:"initial"`
		Insert  bool `json:"insert"`
		Delete  bool `json:"delete"`
		Modify  bool `json:"modify"`
	}
	type wireReq struct {
		Columns []string    `json:"columns,omitempty"`
		Select  *wireSelect `json:"select,omitempty"`
	}
	reqs := make(map[string]wireReq, len(tables))
	for t, r := range tables {
		w := wireReq{Columns: r.Columns}
		if r.Select != nil {
			w.Select = &wireSelect{r.Select.Initial, r.Select.Insert, r.Select.Delete, r.Select.Modify}
		}
		reqs[t] = w
	}
	return json.Marshal([]any{db, id, reqs})
}

// start sends the monitor request on conn and waits for its reply; the
// reader queues the reply as a snapshot before reading any later update.
func (m *Monitor) start(ctx context.Context, conn *rpcConn) error {
	var decodeErr error
	_, err := conn.call(ctx, "monitor", m.params, func(result json.RawMessage) {
		tu, err := decodeTableUpdates(result)
		if err != nil {
			decodeErr = err
			return
		}
		m.enqueue(MonitorUpdate{Snapshot: true, Tables: tu})
	})
	if err != nil {
		return err
	}
	if decodeErr != nil {
		// The connection's view is now unknown: drop it.
		conn.close(fmt.Errorf("%s: %w (monitor %s reply: %w)", conn.addr, ErrDisconnected, m.id, decodeErr))
		return fmt.Errorf("monitor %s reply: %w", m.id, decodeErr)
	}
	return nil
}

// enqueue adds an update for the handler.
func (m *Monitor) enqueue(u MonitorUpdate) {
	m.qmu.Lock()
	if !m.stopped {
		m.queue = append(m.queue, u)
	}
	m.qmu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// dispatch runs the handler over queued updates.
func (m *Monitor) dispatch() {
	defer close(m.done)
	for {
		select {
		case <-m.stopCh:
			return
		case <-m.wake:
		}
		for {
			m.qmu.Lock()
			if m.stopped || len(m.queue) == 0 {
				m.qmu.Unlock()
				break
			}
			u := m.queue[0]
			m.queue[0] = MonitorUpdate{}
			m.queue = m.queue[1:]
			m.qmu.Unlock()
			m.handler(u)
			if u.Snapshot && !m.firstSet {
				m.firstSet = true
				close(m.firstCh)
			}
		}
	}
}

// stop ends dispatching; queued updates are dropped.
func (m *Monitor) stop() {
	m.qmu.Lock()
	if m.stopped {
		m.qmu.Unlock()
		return
	}
	m.stopped = true
	m.queue = nil
	m.qmu.Unlock()
	close(m.stopCh)
	<-m.done
}

// ID returns the monitor id used on the wire.
func (m *Monitor) ID() string { return m.id }

// Cancel stops the monitor: the handler is not called again, and the server
// is told to stop sending updates (monitor_cancel) if the client is connected.
// It must not be called from the handler.
func (m *Monitor) Cancel(ctx context.Context) error {
	c := m.c
	c.monMu.Lock()
	c.mu.Lock()
	_, active := c.monitors[m.id]
	delete(c.monitors, m.id)
	conn := c.conn
	c.mu.Unlock()
	c.monMu.Unlock()
	m.stop()
	if !active || conn == nil || conn.closeErr() != nil {
		return nil
	}
	params, _ := json.Marshal([]string{m.id})
	if _, err := conn.call(ctx, "monitor_cancel", params, nil); err != nil && !isDisconnect(err) {
		return wrap(err, "monitor_cancel "+m.id)
	}
	return nil
}
