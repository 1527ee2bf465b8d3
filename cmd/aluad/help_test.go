package main

import (
	"bytes"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// commands lists every subcommand the usage text names.
func commands() []string {
	seen := map[string]bool{}
	var out []string
	re := regexp.MustCompile(`^  aluad ([a-z]+)`)
	for _, l := range strings.Split(usage, "\n") {
		if m := re.FindStringSubmatch(l); m != nil && !seen[m[1]] {
			seen[m[1]] = true
			out = append(out, m[1])
		}
	}
	return out
}

// run runs the built aluad and returns its stdout, stderr and exit code.
func runAluad(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(cmd.Environ(), "ALUAD_API=http://127.0.0.1:1") // no daemon is ever reached
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

// Every command's -h (and --help) prints its usage and its flags on
// stdout and exits 0, with nothing on stderr.
func TestEveryCommandsHelp(t *testing.T) {
	bin := buildAluad(t)
	cmds := commands()
	require.Greater(t, len(cmds), 20, "the usage text names the commands")
	for _, c := range cmds {
		for _, h := range []string{"-h", "--help"} {
			t.Run(c+" "+h, func(t *testing.T) {
				args := []string{c, h}
				switch c {
				case "help":
					args = []string{c}
				case "host", "map":
					args = []string{c, "add", h}
				case "config":
					args = []string{c, "dump", h}
				}
				out, errs, code := runAluad(t, bin, args...)
				require.Equal(t, 0, code, "stdout %q stderr %q", out, errs)
				require.Empty(t, errs)
				require.Contains(t, out, "aluad "+c)
				if c != "help" {
					require.Contains(t, out, "Usage:\n  aluad "+c)
				}
			})
		}
	}
	out, _, _ := runAluad(t, bin, "move", "-h")
	for _, f := range []string{"-lun", "-to", "-control", "-api"} {
		require.Contains(t, out, "  "+f, "move's flags are listed")
	}
	out, _, _ = runAluad(t, bin, "fault", "--help")
	require.Contains(t, out, "  -node", "fault's flags are listed")
}

// A mistake prints once, plainly, with a hint; never the whole usage.
func TestErrorsPrintOnce(t *testing.T) {
	bin := buildAluad(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"move", "--bogus"}, "aluad move: flag provided but not defined: -bogus\nRun 'aluad move -h' for its flags.\n"},
		{[]string{"move", "--lun", "x"}, "aluad move: invalid value \"x\" for flag -lun: parse error\nRun 'aluad move -h' for its flags.\n"},
		{[]string{"status", "extra"}, "aluad status: unexpected argument \"extra\"\nRun 'aluad status -h' for its flags.\n"},
		{[]string{"host", "frob"}, "aluad host: unknown verb \"frob\"\n"},
		{[]string{"fault", "melt"}, "aluad fault: unknown fault \"melt\""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errs, code := runAluad(t, bin, tc.args...)
			require.Equal(t, 1, code)
			require.Empty(t, out)
			require.True(t, strings.HasPrefix(errs, tc.want), "stderr %q", errs)
			require.NotContains(t, errs, "Usage:")
			require.Equal(t, 1, strings.Count(errs, "aluad "+tc.args[0]+":"), "printed once: %q", errs)
		})
	}
}
