package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/state"
)

// lunIdentity builds a daemon without a network and returns LUN 0's NAA
// designator and serial number as its device server reports them.
func lunIdentity(t *testing.T, cfg config.Config, stateDir string) ([]byte, string, error) {
	t.Helper()
	d, err := New(cfg, Options{Logger: quiet(), StateDir: stateDir})
	if err != nil {
		return nil, "", err
	}
	defer d.Array.Close()
	lu := d.SCSI.LU(0)
	require.NotNil(t, lu)
	id := lu.Config().Identity
	return id.NAA, id.Serial, nil
}

func TestArrayIdentity(t *testing.T) {
	cfgFor := func(id string) config.Config {
		c := config.Loopback(t.TempDir(), 1<<20)
		c.ArrayID = id
		return c
	}
	stateA, stateB := t.TempDir(), t.TempDir()
	naaA, serialA, err := lunIdentity(t, cfgFor(""), stateA)
	require.NoError(t, err)
	require.Len(t, naaA, 8, "NAA 3h: 8 bytes")
	require.Equal(t, byte(0x3), naaA[0]>>4, "the locally assigned NAA format, no IEEE company id claimed")

	tests := []struct {
		name     string
		id       string
		state    string
		sameAsA  bool
		fileWant bool
	}{
		{"the same state directory keeps the identity across restarts", "", stateA, true, true},
		{"another state directory is another array", "", stateB, false, true},
		{"no state directory: the id lives in the data directory", "", "", false, false},
		{"the config's array id overrides the file", "lab-1", stateA, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			naa, serial, err := lunIdentity(t, cfgFor(tc.id), tc.state)
			require.NoError(t, err)
			if tc.sameAsA {
				require.Equal(t, naaA, naa)
				require.Equal(t, serialA, serial)
			} else {
				require.NotEqual(t, naaA, naa)
				require.NotEqual(t, serialA, serial)
			}
			if tc.state != "" {
				_, err := os.Stat(filepath.Join(tc.state, state.IdentityFile))
				require.Equal(t, tc.fileWant, err == nil, "array-id file")
			}
		})
	}
	// The same configured id gives the same identity wherever it runs.
	n1, s1, err := lunIdentity(t, cfgFor("lab-1"), t.TempDir())
	require.NoError(t, err)
	n2, s2, err := lunIdentity(t, cfgFor("lab-1"), "")
	require.NoError(t, err)
	require.Equal(t, n1, n2)
	require.Equal(t, s1, s2)

	// With no state directory the id is kept in the data directory: the
	// same data, the same WWIDs.
	nostate := cfgFor("")
	n3, _, err := lunIdentity(t, nostate, "")
	require.NoError(t, err)
	n4, _, err := lunIdentity(t, nostate, "")
	require.NoError(t, err)
	require.Equal(t, n3, n4)
	_, err = os.Stat(filepath.Join(nostate.Data, state.IdentityFile))
	require.NoError(t, err)

	// A damaged id file stops the start: a silent new id would give every
	// LUN a new WWID under its hosts.
	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, state.IdentityFile), []byte("not an id!\n"), 0o600))
	_, _, err = lunIdentity(t, cfgFor(""), bad)
	require.ErrorContains(t, err, state.IdentityFile)
	c := cfgFor("")
	c.ArrayID = "has space"
	require.Error(t, c.Validate(), "a bad array_id in the config is refused")
}

// Two arrays at their default configuration, side by side, present
// different WWIDs for their LUN 0 on every path (read by an initiator
// from VPD 0x83), and the same on every path of each: a host's
// multipath groups the paths of each array into a device of its own.
func TestTwoArraysTwoWWIDs(t *testing.T) {
	naas := map[string][]string{}
	for _, name := range []string{"one", "two"} {
		data := t.TempDir()
		d, err := Start(config.Loopback(data, 1<<20), Options{Logger: quiet(), StatsInterval: -1,
			StateDir: filepath.Join(data, "state")})
		require.NoError(t, err)
		t.Cleanup(func() { d.Stop(5 * time.Second) })
		for i, p := range d.Portals() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s, err := initiator.Dial(ctx, initiator.Config{Addr: p.Addr, Target: p.Target,
				InitiatorName: "iqn.2026-11.org.example:twoarrays", ISID: [6]byte{0x80, 0, 0, 0, 0, byte(i + 1)}})
			require.NoError(t, err)
			page, err := s.Inquiry(ctx, 0, true, 0x83)
			s.Close()
			cancel()
			require.NoError(t, err)
			naas[name] = append(naas[name], string(firstNAA(t, page)))
		}
	}
	for name, ids := range naas {
		require.NotEmpty(t, ids)
		for _, id := range ids {
			require.Equal(t, ids[0], id, "array %s: one NAA on every path", name)
		}
	}
	require.NotEqual(t, naas["one"][0], naas["two"][0], "two arrays never share a WWID")
}

// firstNAA returns the first NAA designator of a VPD 0x83 page.
func firstNAA(t *testing.T, page []byte) []byte {
	t.Helper()
	require.GreaterOrEqual(t, len(page), 4)
	for b := page[4:]; len(b) >= 4; {
		n := int(b[3])
		require.LessOrEqual(t, 4+n, len(b), "designator length")
		if b[1]&0x0f == 3 {
			return b[4 : 4+n]
		}
		b = b[4+n:]
	}
	t.Fatal("no NAA designator")
	return nil
}
