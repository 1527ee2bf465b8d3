package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/initiator"
)

// testConfig is the default topology on ephemeral loopback ports with
// small LUNs.
func testConfig(dir string) config.Config {
	cfg := config.Default()
	cfg.Data = dir
	for i := range cfg.Nodes {
		for j := range cfg.Nodes[i].Ports {
			cfg.Nodes[i].Ports[j].Addr = fmt.Sprintf("127.0.0.%d:0", 1+j)
		}
	}
	for i := range cfg.LUNs {
		cfg.LUNs[i].Size = 16 << 20
	}
	return cfg
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(t *testing.T, cfg config.Config) *Daemon {
	t.Helper()
	d, err := Start(cfg, Options{Logger: quiet()})
	require.NoError(t, err)
	return d
}

func dial(t testing.TB, d *Daemon, port int, isid byte, name string) *initiator.Session {
	t.Helper()
	p := d.Portals()[port]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := initiator.Dial(ctx, initiator.Config{Addr: p.Addr, Target: p.Target, InitiatorName: name,
		ISID: [6]byte{0x80, 0, 0, 0, 0, isid}})
	require.NoError(t, err)
	return s
}

// pattern is a block stamped with its writer, LUN and LBA, so a misplaced
// or stale block is detected.
func pattern(writer, lun, lba uint64, bs int) []byte {
	b := make([]byte, bs)
	for i := 0; i+24 <= bs; i += 24 {
		binary.BigEndian.PutUint64(b[i:], writer)
		binary.BigEndian.PutUint64(b[i+8:], lun)
		binary.BigEndian.PutUint64(b[i+16:], lba)
	}
	return b
}

// TestTwoSessionsPatternsSurviveRestart writes distinct patterns on every
// LUN from two sessions at once (each through a different node), verifies
// them, restarts the daemon on the same data directory and verifies again.
func TestTwoSessionsPatternsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	d := start(t, cfg)
	ctx := context.Background()
	sessions := []*initiator.Session{
		dial(t, d, 0, 1, "iqn.2026-11.org.aluad.test:h1"),
		dial(t, d, 2, 2, "iqn.2026-11.org.aluad.test:h2"),
	}
	luns, err := sessions[0].ReportLUNs(ctx)
	require.NoError(t, err)
	require.Len(t, luns, 8)
	const bs, blocksPerWriter = 512, 64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w, s := range sessions {
		wg.Add(1)
		go func(w int, s *initiator.Session) {
			defer wg.Done()
			for _, lun := range luns {
				if _, err := s.ClearUA(ctx, lun, 8); err != nil {
					errs <- err
					return
				}
				for i := 0; i < blocksPerWriter; i++ {
					lba := uint64(w*blocksPerWriter + i)
					if err := s.Write16(ctx, lun, lba, pattern(uint64(w), lun, lba, bs), bs, false); err != nil {
						errs <- fmt.Errorf("writer %d LUN %d LBA %d: %w", w, lun, lba, err)
						return
					}
				}
			}
		}(w, s)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	verify := func(s *initiator.Session) {
		for _, lun := range luns {
			data, err := s.Read16(ctx, lun, 0, 2*blocksPerWriter, bs)
			require.NoError(t, err)
			for lba := 0; lba < 2*blocksPerWriter; lba++ {
				want := pattern(uint64(lba/blocksPerWriter), lun, uint64(lba), bs)
				require.True(t, bytes.Equal(want, data[lba*bs:(lba+1)*bs]), "LUN %d LBA %d", lun, lba)
			}
		}
	}
	verify(sessions[1])
	for _, s := range sessions {
		require.NoError(t, s.Logout(ctx))
	}
	require.NoError(t, d.Stop(5*time.Second))

	d2 := start(t, cfg)
	defer d2.Stop(5 * time.Second)
	s := dial(t, d2, 1, 3, "iqn.2026-11.org.aluad.test:h3")
	for _, lun := range luns {
		_, err := s.ClearUA(ctx, lun, 8)
		require.NoError(t, err)
	}
	verify(s)
}

// TestUnitAttentionOnNewNexus checks that a new I_T nexus sees POWER ON,
// RESET (29/00) once per LUN, and that INQUIRY neither reports nor clears it.
func TestUnitAttentionOnNewNexus(t *testing.T) {
	d := start(t, testConfig(t.TempDir()))
	defer d.Stop(time.Second)
	ctx := context.Background()
	s := dial(t, d, 0, 1, "iqn.2026-11.org.aluad.test:ua")
	_, err := s.Inquiry(ctx, 3, false, 0)
	require.NoError(t, err, "INQUIRY must not report a unit attention")
	seen, err := s.ClearUA(ctx, 3, 4)
	require.NoError(t, err)
	require.Equal(t, [][2]byte{{0x29, 0x00}}, seen)
	require.NoError(t, s.TestUnitReady(ctx, 3))
}

// TestSendTargetsListsEveryPortal checks discovery returns all four
// portals with their TPGTs.
func TestSendTargetsListsEveryPortal(t *testing.T) {
	d := start(t, testConfig(t.TempDir()))
	defer d.Stop(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := initiator.Dial(ctx, initiator.Config{Addr: d.Portals()[3].Addr, Discovery: true})
	require.NoError(t, err)
	kvs, err := s.SendTargets(ctx)
	require.NoError(t, err)
	var addrs []string
	for _, kv := range kvs {
		if kv.Key == "TargetAddress" {
			addrs = append(addrs, kv.Value)
		}
	}
	want := []string{}
	for _, p := range d.Portals() {
		want = append(want, fmt.Sprintf("%s,%d", p.Addr, p.RelativeID))
	}
	require.Equal(t, want, addrs)
	require.NoError(t, s.Logout(ctx))
}
