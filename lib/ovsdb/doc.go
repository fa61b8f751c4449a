// Package ovsdb is an OVSDB client (RFC 7047) with helpers for the Open
// vSwitch configuration database.
//
// It knows nothing of Kubernetes and execs no Open vSwitch tool: it speaks
// JSON-RPC to ovsdb-server directly, over "unix:/path" or "tcp:host:port".
//
// # Connection
//
// Dial connects; the Client then keeps the connection alive by itself. It
// answers the server's "echo" requests, sends its own every
// Options.EchoInterval and drops a connection whose server stays silent for
// Options.EchoTimeout. A lost connection is re-made with exponential
// back-off. A call in flight when the connection is lost fails with an error
// wrapping ErrDisconnected (for a transact the outcome is then unknown);
// calls made while reconnecting wait for the new connection.
//
// The RPC methods are ListDBs, GetSchema, Transact (a context that ends
// before the reply sends "cancel"), Monitor (with its "update"
// notifications; Monitor.Cancel sends "monitor_cancel") and Echo.
//
// # Data model
//
// Values follow the notation of RFC 7047 section 5.1: atoms are string,
// int64, float64, bool, UUID and NamedUUID; sets are Set (a one-element set
// may arrive as its bare atom); maps are Map. DecodeValue, DecodeRow and
// DecodeTableUpdates decode; EncodeValue and the MarshalJSON methods encode.
// Decoded values keep no references into their input. Bad input gives errors
// wrapping ErrMalformed that name the table, row and column.
//
// Typed rows (OpenvSwitch, Bridge, Port, Interface, Controller) hold the
// columns nodeflow uses; BridgeFromRow and friends convert.
//
// # Transactions
//
// Insert, Select, Update, Mutate, Delete, Wait and Comment build operations.
// A failing operation comes back as an error wrapping *OpError, which
// carries the operation's index and name and the server's error and details:
//
//	ovsdb: transact ensure bridge br0: op 3 (insert Bridge): constraint violation: ...
//
// # Monitors and the Interface cache
//
// Monitor hands its handler a snapshot, then every change, on a goroutine of
// its own. After a reconnection the monitor is started again and the handler
// receives a fresh snapshot (MonitorUpdate.Snapshot). InterfaceCache builds on that:
// it keeps the Interface rows, turns each change into an InterfaceEvent
// (added, updated, deleted, with the old and new ofport), and after a
// reconnection reports the differences between what it held and the fresh
// snapshot, deletions included.
//
// # Open_vSwitch helpers
//
// EnsureBridge, EnsurePort, DeletePort, SetBridgeExternalIDs, ListPorts,
// BridgeExternalIDs and WaitOfport. Each helper that writes does so in one
// transaction guarded by "wait" operations that assert that what it read
// still holds (it reads again and retries when another client got there
// first), and sends no write at all when nothing needs to change, so that
// running it twice changes nothing.
package ovsdb
