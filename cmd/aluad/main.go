// Command aluad emulates the firmware of a multi-controller storage array
// with implicit ALUA. Subcommands: serve (the array on the embedded pure-Go
// iSCSI fabric).
package main

import (
	"fmt"
	"os"
)

const usage = `aluad: an implicit-ALUA multi-controller storage array emulator

Usage:
  aluad serve [--config FILE] [--data DIR]   run the array (embedded default: 2 nodes, 4 ports, 8 LUNs)
  aluad help                                 this text

Run 'aluad <command> -h' for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "aluad: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aluad %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
