package ovsdb

import (
	"context"
	"fmt"
	"time"
)

// WaitApplied asks ovs-vswitchd to apply the database as it is now and
// waits until it has, as `ovs-vsctl --wait=vswitchd` does: it increments
// Open_vSwitch.next_cfg and waits until ovs-vswitchd reports that
// sequence number in cur_cfg. Use it between two changes that
// ovs-vswitchd must not see as one, such as deleting a port and adding
// one of the same name on a new device: seen together, they leave the
// port on the device that is gone.
func (c *Client) WaitApplied(ctx context.Context) error {
	const label = "wait for ovs-vswitchd to apply the configuration"
	res, err := c.transact(ctx, DatabaseName, label, []Operation{
		Mutate(TableOpenvSwitch, nil, Mutation{Column: "next_cfg", Mutator: "+=", Value: 1}),
		Select(TableOpenvSwitch, nil, "next_cfg"),
	})
	if err != nil {
		return err
	}
	if len(res) < 2 || len(res[1].Rows) != 1 {
		return fmt.Errorf("ovsdb: %s: no Open_vSwitch row (database not initialised?)", label)
	}
	o, err := OpenvSwitchFromRow("", res[1].Rows[0])
	if err != nil {
		return wrap(err, label)
	}
	wait := time.Millisecond
	for {
		sw, err := c.Switch(ctx)
		if err != nil {
			return wrap(err, label)
		}
		if sw.CurCfg >= o.NextCfg {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ovsdb: %s: cur_cfg %d, want %d: %w", label, sw.CurCfg, o.NextCfg, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}
