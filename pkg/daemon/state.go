package daemon

// The saved state (pkg/state): the daemon's store, saved after every
// change and loaded before anything is served.

import (
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/state"
)

// stateDirty asks the saver to write the state.
func (d *Daemon) stateDirty() {
	if d.state != nil {
		d.state.Dirty()
	}
}

// Snapshot is the state as it stands now.
func (d *Daemon) Snapshot() state.State {
	s := state.Take(d.Array, d.SCSI, d.now())
	if d.state != nil {
		d.state.Fill(&s)
	}
	return s
}

// SaveState writes the state now.
func (d *Daemon) SaveState() error {
	if d.state == nil {
		return nil
	}
	return d.state.Save(d.Snapshot)
}

// recordReport adds a raise or clear to the history.
func (d *Daemon) recordReport(r api.ReportInfo) {
	if d.state != nil {
		d.state.Record(r)
	}
}

// ReportHistory returns the saved report history.
func (d *Daemon) ReportHistory() []api.ReportRecord {
	if d.state == nil {
		return []api.ReportRecord{}
	}
	return d.state.History()
}

// openState loads dir's state into the array before anything is served.
// A damaged or inconsistent file is moved aside and reported; the
// previous generation is tried next, then the config alone.
func (d *Daemon) openState(dir string) error {
	st, err := state.Open(dir, d.Array.Config(), d.log, d.now)
	if err != nil {
		return err
	}
	d.state = st
	if problems := st.Load(func(s state.State) error { return state.Apply(d.Array, d.SCSI, d.log, s) }); problems != "" {
		d.Events.Add(api.Event{Kind: api.EventState, Reason: "state file rejected: " + problems})
	}
	return nil
}
