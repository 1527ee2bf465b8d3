package ownership

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
)

// The type a host's behaviour fits: never the one it is declared with,
// and nothing for a host that behaves as its type says.
func TestSuggestType(t *testing.T) {
	for _, tt := range []struct {
		name      string
		typ       alua.HostType
		initiator string
		extended  bool
		state     int
		want      string
	}{
		{"windows, not following", alua.HostType{Name: "windows", TPGS: true}, "iqn.1991-05.com.microsoft:w1", false, followNo, "legacy"},
		{"vmware, not following", alua.HostType{Name: "vmware", TPGS: true}, "iqn.1998-01.com.vmware:esx1", false, followNo, "legacy"},
		{"linux, not following", alua.HostType{Name: "linux", TPGS: true}, "iqn.1994-05.com.redhat:l1", true, followNo, "linux-dmmp"},
		{"linux, following", alua.HostType{Name: "linux", TPGS: true}, "iqn.1994-05.com.redhat:l1", true, followYes, ""},
		{"linux-dmmp, not following", alua.HostType{Name: "linux-dmmp", TPGS: true, NonOwner: alua.Standby}, "iqn.1993-08.org.debian:01:x", true, followNo, "legacy"},
		{"undeclared Debian", alua.HostType{Name: "default", TPGS: true}, "iqn.1993-08.org.debian:01:x", false, followUnknown, "linux-dmmp"},
		{"undeclared Microsoft", alua.HostType{Name: "default", TPGS: true}, "iqn.1991-05.com.microsoft:w", false, followUnknown, "windows"},
		{"undeclared, extended RTPG", alua.HostType{Name: "default", TPGS: true}, "iqn.2026-11.org.example:h", true, followUnknown, "linux-dmmp"},
		{"undeclared, nothing known", alua.HostType{Name: "default", TPGS: true}, "iqn.2026-11.org.example:h", false, followUnknown, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(DefaultConfig())
			require.NoError(t, err)
			require.NoError(t, c.Step(NodeDecl{Node: "a", Capacity: 1}))
			require.NoError(t, c.Step(HostDecl{Host: "h", Type: tt.typ}))
			h := c.hosts["h"]
			h.obs.initiator, h.obs.extended, h.obs.state, h.obs.rtpg = tt.initiator, tt.extended, tt.state, true
			got, why := c.suggestType(h)
			require.Equal(t, tt.want, got, why)
			require.NotEqual(t, tt.typ.Name, got, "never the declared type")
			if got != "" {
				require.NotEmpty(t, why)
			}
		})
	}
}
