package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/iscsi"
	"github.com/aluad/aluad/pkg/mgmt"
	"github.com/aluad/aluad/pkg/scsi"
)

const (
	dbIQN1 = "iqn.2026-11.org.example:db1"
	dbIQN2 = "iqn.2026-11.org.example:db2"
	webIQN = "iqn.2026-11.org.example:web"

	db1Secret   = "db1-secret-0123456"
	webSecret   = "web-secret-0123456"
	arrayUser   = "aluad-array"
	arraySecret = "array-secret-98765"
)

// lockedBuffer collects log output from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// accessDaemon: hosts db1, db2 (group db) and web; db1 with CHAP and the
// array's mutual credentials, web with one-way CHAP; LUNs 0-1 to group db,
// LUN 5 to web at LUN 0; unknown initiators refused.
func accessDaemon(t *testing.T, unknown string, logs *lockedBuffer) (*Daemon, *api.Client) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.Auth.CHAP = nil
	cfg.Hosts = []array.HostConfig{
		{Name: "db1", Group: "db", Initiators: []string{dbIQN1},
			CHAP: &array.CHAPConfig{User: "db1", Secret: db1Secret, TargetUser: arrayUser, TargetSecret: arraySecret}},
		{Name: "db2", Group: "db", Initiators: []string{dbIQN2}},
		{Name: "web", Initiators: []string{webIQN}, CHAP: &array.CHAPConfig{User: "web", Secret: webSecret}},
	}
	five := uint64(0)
	cfg.Mappings = []array.MappingConfig{{LUN: 0, Group: "db"}, {LUN: 1, Group: "db"}, {LUN: 5, Host: "web", HostLUN: &five}}
	cfg.Access.UnknownInitiators = unknown
	require.NoError(t, cfg.Validate())
	lg := quiet()
	if logs != nil {
		lg = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	d, err := Start(cfg, Options{Logger: lg, API: "127.0.0.1:0", StatsInterval: -1, StateDir: filepath.Join(t.TempDir(), "state")})
	require.NoError(t, err)
	t.Cleanup(func() { d.Stop(5 * time.Second) })
	return d, api.NewHTTPClient("http://"+d.APIAddr(), "")
}

func dialWith(d *Daemon, port int, c initiator.Config) (*initiator.Session, error) {
	p := d.Portals()[port]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.Addr = p.Addr
	if !c.Discovery {
		c.Target = p.Target
	}
	return initiator.Dial(ctx, c)
}

func loginStatus(err error) (byte, byte) {
	var le *initiator.LoginError
	if errors.As(err, &le) {
		return le.Class, le.Detail
	}
	return 0xff, 0xff
}

func TestCHAPLogins(t *testing.T) {
	logs := &lockedBuffer{}
	d, c := accessDaemon(t, "refuse", logs)
	one := func(user, secret string) *iscsi.CHAPCreds {
		return &iscsi.CHAPCreds{Initiator: iscsi.CHAPSecret{User: user, Secret: secret}}
	}
	mutual := func(tsecret string) *iscsi.CHAPCreds {
		return &iscsi.CHAPCreds{Initiator: iscsi.CHAPSecret{User: "db1", Secret: db1Secret},
			Target: iscsi.CHAPSecret{User: arrayUser, Secret: tsecret}}
	}
	tests := []struct {
		name      string
		cfg       initiator.Config
		wantClass byte // 0: logged in
		wantErr   error
	}{
		{"one-way, right secret", initiator.Config{InitiatorName: webIQN, CHAP: one("web", webSecret)}, 0, nil},
		{"one-way, SHA-256", initiator.Config{InitiatorName: webIQN, CHAP: one("web", webSecret), CHAPAlgorithms: "7,5"}, 0, nil},
		{"one-way, wrong secret", initiator.Config{InitiatorName: webIQN, CHAP: one("web", "wrong-secret-0000")}, 2, nil},
		{"one-way, another host's secret", initiator.Config{InitiatorName: webIQN, CHAP: one("db1", db1Secret)}, 2, nil},
		{"one-way, no CHAP at all", initiator.Config{InitiatorName: webIQN}, 2, nil},
		{"mutual, both right", initiator.Config{InitiatorName: dbIQN1, CHAP: mutual(arraySecret)}, 0, nil},
		{"mutual, wrong initiator secret", initiator.Config{InitiatorName: dbIQN1,
			CHAP: &iscsi.CHAPCreds{Initiator: iscsi.CHAPSecret{User: "db1", Secret: "wrong-secret-1111"},
				Target: iscsi.CHAPSecret{User: arrayUser, Secret: arraySecret}}}, 2, nil},
		{"mutual, initiator expects another target secret", initiator.Config{InitiatorName: dbIQN1, CHAP: mutual("not-the-array-secret")}, 0, initiator.ErrMutualCHAP},
		{"mutual asked of a host without it", initiator.Config{InitiatorName: webIQN,
			CHAP: &iscsi.CHAPCreds{Initiator: iscsi.CHAPSecret{User: "web", Secret: webSecret},
				Target: iscsi.CHAPSecret{User: arrayUser, Secret: arraySecret}}}, 2, nil},
		{"host without CHAP", initiator.Config{InitiatorName: dbIQN2}, 0, nil},
		{"unknown initiator refused", initiator.Config{InitiatorName: unknownIQN}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := dialWith(d, 0, tc.cfg)
			switch {
			case tc.wantErr != nil:
				require.ErrorIs(t, err, tc.wantErr)
			case tc.wantClass == 0:
				require.NoError(t, err)
				s.Close()
			default:
				class, detail := loginStatus(err)
				require.Equal(t, tc.wantClass, class, "status class: initiator error (%v)", err)
				want := byte(0x01) // authentication failure
				if tc.cfg.InitiatorName == unknownIQN {
					want = 0x02 // authorization failure
				}
				require.Equal(t, want, detail)
			}
		})
	}
	// Secrets appear nowhere: not in the logs, the status, the hosts view.
	st, err := c.Status()
	require.NoError(t, err)
	hosts, err := c.Hosts()
	require.NoError(t, err)
	views, _ := json.Marshal([]any{st, hosts, d.Array.Config()})
	for _, sec := range []string{db1Secret, webSecret, arraySecret} {
		require.NotContains(t, logs.String(), sec)
		require.NotContains(t, string(views), sec)
	}
	byName := map[string]api.HostInfo{}
	for _, h := range hosts {
		byName[h.Name] = h
	}
	require.Equal(t, "chap-mutual", byName["db1"].Auth)
	require.Equal(t, "chap", byName["web"].Auth)
	require.Equal(t, "none", byName["db2"].Auth)
}

// TestDiscoveryCHAP: with auth.discovery, SendTargets needs CHAP too.
func TestDiscoveryCHAP(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Auth = array.AuthConfig{Discovery: true, CHAP: &array.CHAPConfig{User: "any", Secret: "target-wide-secret"}}
	require.NoError(t, cfg.Validate())
	d := start(t, cfg)
	defer d.Stop(5 * time.Second)
	_, err := dialWith(d, 0, initiator.Config{InitiatorName: unknownIQN, Discovery: true})
	class, detail := loginStatus(err)
	require.Equal(t, [2]byte{2, 1}, [2]byte{class, detail})
	s, err := dialWith(d, 0, initiator.Config{InitiatorName: unknownIQN, Discovery: true,
		CHAP: &iscsi.CHAPCreds{Initiator: iscsi.CHAPSecret{User: "any", Secret: "target-wide-secret"}}})
	require.NoError(t, err)
	kvs, err := s.SendTargets(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, kvs)
	s.Close()
}

func reportLUNs(t *testing.T, s *initiator.Session) []uint64 {
	t.Helper()
	r, err := s.Execute(context.Background(), 0, []byte{scsi.OpReportLUNs, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0}, nil, 1024)
	require.NoError(t, err)
	require.Equal(t, byte(0), r.Status)
	var out []uint64
	for i := 8; i+8 <= len(r.Data); i += 8 {
		out = append(out, uint64(binary.BigEndian.Uint16(r.Data[i:])&0x3fff))
	}
	return out
}

// serialAt reads VPD 0x80 through a host LUN: which array LUN is there.
func serialAt(t *testing.T, s *initiator.Session, lun uint64) string {
	t.Helper()
	r, err := s.Execute(context.Background(), lun, []byte{scsi.OpInquiry, 1, 0x80, 0, 255, 0}, nil, 255)
	require.NoError(t, err)
	require.Equal(t, byte(0), r.Status, "sense %x", r.Sense)
	return string(r.Data[4:])
}

func clearUAs(s *initiator.Session, luns ...uint64) {
	for _, l := range luns {
		for i := 0; i < 4; i++ {
			r, err := s.Execute(context.Background(), l, make([]byte, 6), nil, 0)
			if err != nil || r.Status == 0 {
				break
			}
		}
	}
}

// TestLUNMappingEndToEnd: each host sees exactly its LUNs at its numbers;
// an unknown initiator (no-luns) sees none and gets PQ 011b; a mapping
// change over the API raises 3F/0E on the nexuses it affects only, and is
// audited with who made it.
func TestLUNMappingEndToEnd(t *testing.T) {
	d, c := accessDaemon(t, "no-luns", nil)
	web, err := dialWith(d, 0, initiator.Config{InitiatorName: webIQN,
		CHAP: &iscsi.CHAPCreds{Initiator: iscsi.CHAPSecret{User: "web", Secret: webSecret}}})
	require.NoError(t, err)
	defer web.Close()
	db2, err := dialWith(d, 1, initiator.Config{InitiatorName: dbIQN2})
	require.NoError(t, err)
	defer db2.Close()
	stranger, err := dialWith(d, 2, initiator.Config{InitiatorName: unknownIQN})
	require.NoError(t, err)
	defer stranger.Close()

	require.Equal(t, []uint64{0}, reportLUNs(t, web))
	require.Equal(t, []uint64{0, 1}, reportLUNs(t, db2))
	require.Empty(t, reportLUNs(t, stranger), "an unknown initiator sees no LUN")
	clearUAs(web, 0)
	clearUAs(db2, 0, 1)
	lun5 := d.Array.Serial(d.Array.LUN(5))
	require.Equal(t, lun5, serialAt(t, web, 0), "web's LUN 0 is the array's LUN 5")
	require.Equal(t, d.Array.Serial(d.Array.LUN(1)), serialAt(t, db2, 1))

	r, err := stranger.Execute(context.Background(), 0, []byte{scsi.OpInquiry, 0, 0, 0, 96, 0}, nil, 96)
	require.NoError(t, err)
	require.Equal(t, byte(0x7f), r.Data[0], "PQ 011b, type 1Fh on an unmapped LUN")
	r, err = web.Execute(context.Background(), 3, []byte{scsi.OpRead10, 0, 0, 0, 0, 0, 0, 0, 1, 0}, nil, 512)
	require.NoError(t, err)
	require.Equal(t, byte(2), r.Status)
	require.Equal(t, byte(0x25), r.Sense[12], "LOGICAL UNIT NOT SUPPORTED")

	// Map LUN 3 to web at LUN 7: web's nexus gets 3F/0E, db2's does not.
	seven := uint64(7)
	res, err := c.Map(array.MappingConfig{LUN: 3, Host: "web", HostLUN: &seven})
	require.NoError(t, err)
	require.Equal(t, 1, res.Told)
	require.Equal(t, []string{webIQN}, res.Changed)
	r, err = web.Execute(context.Background(), 0, make([]byte, 6), nil, 0)
	require.NoError(t, err)
	require.Equal(t, byte(2), r.Status)
	require.Equal(t, [3]byte{6, 0x3f, 0x0e}, [3]byte{r.Sense[2] & 0xf, r.Sense[12], r.Sense[13]}, "REPORTED LUNS DATA HAS CHANGED")
	require.Equal(t, []uint64{0, 7}, reportLUNs(t, web))
	r, err = db2.Execute(context.Background(), 0, make([]byte, 6), nil, 0)
	require.NoError(t, err)
	require.Equal(t, byte(0), r.Status, "db2's view did not change: no UA")

	_, err = c.Map(array.MappingConfig{LUN: 4, Host: "web", HostLUN: &seven})
	require.ErrorContains(t, err, "already sees LUN 3 at LUN 7")
	res, err = c.Unmap(3, "web", "")
	require.NoError(t, err)
	require.Equal(t, 1, res.Told)
	_, err = c.Unmap(3, "web", "")
	require.ErrorContains(t, err, "not mapped")

	// The audit log names the caller of every change, refused ones too.
	ev, err := c.Events(0)
	require.NoError(t, err)
	var audits []api.Event
	for _, e := range ev.Events {
		if e.Kind == api.EventAudit {
			audits = append(audits, e)
		}
	}
	require.Len(t, audits, 4)
	require.Contains(t, audits[0].Initiator, "api 127.0.0.1:")
	require.Contains(t, audits[0].Reason, `POST /v1/mappings {"lun":3,"host":"web","host_lun":7} -> 200`)
	require.Contains(t, audits[1].Reason, "-> 400")
	raw, err := os.ReadFile(filepath.Join(d.state.Info().Dir, "audit.log"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 4)
	var rec mgmt.AuditRecord
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &rec))
	require.Equal(t, "DELETE", rec.Method)
	require.Equal(t, 200, rec.Status)
}
