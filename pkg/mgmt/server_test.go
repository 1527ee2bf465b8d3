package mgmt

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An API address other machines can reach needs a token.
func TestCheckAPIAddr(t *testing.T) {
	for _, c := range []struct {
		addr, token, err string
	}{
		{"127.0.0.1:8090", "", ""},
		{"localhost:0", "", ""},
		{"[::1]:8090", "", ""},
		{"0.0.0.0:8090", "", "reachable from other machines"},
		{"10.1.2.3:8090", "", "give it a token"},
		{"0.0.0.0:8090", "s3cret", ""},
		{":8090", "", "reachable from other machines"},
		{"8090", "", "missing port"},
	} {
		err := checkAPIAddr(c.addr, c.token)
		if c.err == "" {
			require.NoError(t, err, c.addr)
		} else {
			require.ErrorContains(t, err, c.err, c.addr)
		}
	}
}
