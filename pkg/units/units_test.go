package units

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1GiB": 1 << 30, "512MiB": 512 << 20, "4096": 4096, "2G": 2 << 30} {
		got, err := ParseSize(in)
		require.NoError(t, err)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "-1", "1XB", "GiB"} {
		_, err := ParseSize(bad)
		require.Error(t, err, bad)
	}
}
