package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Bad input to aluad sim gets a clear error before anything runs.
func TestSimRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", "--plant", "bogus"}, `--plant "bogus": one of no-fence, no-probes, none`},
		{[]string{"--plant", "no-fence"}, "--plant needs --cluster"},
		{[]string{"--cluster", "--script", "x.txt"}, "--script is not for --cluster"},
		{[]string{"--cluster", "--shrink", "1s"}, "--shrink is not for --cluster"},
		{[]string{"--cluster", "--seeds", "0"}, "--seeds, --steps (up to 10000) and --jobs must be positive"},
		{[]string{"--cluster", "--steps", "20000"}, "--seeds, --steps (up to 10000) and --jobs must be positive"},
		{[]string{"--cluster", "--jobs", "0"}, "--seeds, --steps (up to 10000) and --jobs must be positive"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			require.ErrorContains(t, simCmd(tc.args), tc.want)
		})
	}
}
