// Command aluad emulates the firmware of a multi-controller storage array
// with implicit ALUA. Subcommands: serve (the array on the embedded pure-Go
// iSCSI fabric, with its management API, /metrics and web dashboard), the
// management clients (status, luns, hosts, paths, report, fault, move,
// rebalance, events), and the in-process lab.
package main

import (
	"fmt"
	"os"
)

const usage = `aluad: an implicit-ALUA multi-controller storage array emulator

Usage:
  aluad serve [--config FILE] [--data DIR] [--api ADDR]
                                             run the array (embedded default: 2 nodes, 4 ports, 8 LUNs),
                                             with the management API, /metrics and the web dashboard
                                             on ADDR (default 127.0.0.1:8090)
  aluad status [-o text|json]                nodes, ports, sessions and problems at a glance
  aluad luns [-o text|json]                  owners, preferred owners, ALUA state per group, forwarded I/O
  aluad hosts [-o text|json]                 declared hosts and unknown initiators, connectivity per node
  aluad paths [-o text|json]                 per-path counters, latency and per-LUN state on each path
  aluad report [-o text|json]                the problems raised now, as Recovery Guru reports
  aluad report clear --condition C [--lun N|--host H|--node N]
                                             clear a latched report (path-flapping, host-type-incorrect,
                                             node-unstable)
  aluad fault KIND [--node N] [--port P] [--initiator IQN] [--delay D]
                                             inject a fault: power-loss, panic, crash, restart (a node);
                                             port-down, port-up, cable-pull, cable-plug (a port);
                                             path-down, path-up, delay, clear (docs/faults.md)
  aluad move --lun N --to NODE               move a LUN's ownership (flush, short hold, then UA 2A/06)
  aluad rebalance [-o text|json]             plan a rebalance now (the ROI check still decides)
  aluad events [--kind K,...] [--since SEQ|10m] [--samples] [--follow] [-o text|json]
                                             the event log: logins, logouts, RTPGs, unit attentions, ALUA
                                             changes, reports, faults, operator changes; the per-interval
                                             I/O samples (io, path) with --samples
  aluad lab [--scenario NAME] [...]          in-process runs: crash (acknowledged writes after node
                                             crashes), transition (I/O latency through failback and
                                             rebalance), mirror (write bandwidth, mirroring on vs off)
  aluad qualify [--quick | --schedule quick|full|FILE] [--hosts H,...] [--limits FILE] [--out DIR] [--lab]
                                             qualify the hosts logged in to the running array: planned moves,
                                             a rebalance, port faults, controller failures and a rolling
                                             upgrade, measured at the array; table, HTML, JSON, JUnit
                                             (docs/qualify.md); --lab: emulated hosts in process
  aluad map [list|add|rm] [--lun N] [--host H|--group G|--all] [--host-lun M]
                                             the LUN map: which host sees which LUN at which number
                                             (a change queues 3F/0E on the nexuses it affects)
  aluad host [list|types|add|set|remove] NAME [--type T] [--initiator IQN] [--add-initiator IQN]
                    [--remove-initiator IQN] [--group G]
                                             the declared hosts, changed live: no restart, no session
                                             dropped (2A/06 where access states change, 3F/0E where
                                             the LUNs a host sees change); kept across restarts
  aluad config dump [--out FILE]             the running configuration as YAML for serve --config
  aluad soak [--sessions 256] [--duration 30m] [--fault-every 30s]
                                             in-process endurance run: verified I/O from many sessions
                                             under faults; mismatches and resource growth
  aluad abuse [--attackers 48] [--duration 1m]
                                             in-process attack: malformed PDUs, floods, half-open and
                                             stalled connections; what well-behaved sessions saw
  aluad sim [--seeds 100] [--seed 1] [--steps 400] [--script FILE]
                                             the deterministic whole-array simulation: crashes, faults
                                             and hosts at any moment, invariants after every event;
                                             a failing seed is shrunk to a replayable script
  aluad sim --cluster [--seeds 100] [--seed 1] [--steps 24] [--jobs N] [--out DIR]
                    [--plant none|no-fence|no-probes]
                                             cluster seeds: two real controllers in one process on fake
                                             time, under pauses, kills, store and interlink cuts and
                                             frozen etcd members; a planted defect must be caught
  aluad witness [--name N] [--data DIR] [--client-url URL] [--peer-url URL] [--cluster N=URL,...]
                                             an etcd member with no controller: the third vote two
                                             controllers of cluster mode need (docs/cluster.md)
  aluad controller --config FILE --node N [--etcd-data DIR --etcd-client-url URL --etcd-peer-url URL --etcd-cluster N=URL,...]
                                             one controller of the array as its own process, coordinated
                                             through etcd with the others (docs/cluster.md)
  aluad help                                 this text

The client commands reach the running daemon on its control socket
(--control PATH, or --data DIR for DIR/aluad.sock), or on its management
API with --api URL (env ALUAD_API) and --token-file FILE (env
ALUAD_API_TOKEN). With none of these they look for a local daemon:
./aluad-data/aluad.sock, the link 'aluad serve' leaves at
$XDG_RUNTIME_DIR/aluad.sock (or aluad-<uid>.sock in the temporary
directory), then the API at 127.0.0.1:8090.

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
	case "move":
		err = move(os.Args[2:])
	case "luns":
		err = luns(os.Args[2:])
	case "status":
		err = status(os.Args[2:])
	case "hosts":
		err = hosts(os.Args[2:])
	case "paths":
		err = paths(os.Args[2:])
	case "rebalance":
		err = rebalance(os.Args[2:])
	case "events":
		err = events(os.Args[2:])
	case "fault":
		err = fault(os.Args[2:])
	case "report":
		err = report(os.Args[2:])
	case "lab":
		err = labCmd(os.Args[2:])
	case "map":
		err = mapCmd(os.Args[2:])
	case "host":
		err = hostCmd(os.Args[2:])
	case "config":
		err = configCmd(os.Args[2:])
	case "soak":
		err = soakCmd(os.Args[2:])
	case "abuse":
		err = abuseCmd(os.Args[2:])
	case "sim":
		err = simCmd(os.Args[2:])
	case "witness":
		err = witnessCmd(os.Args[2:])
	case "controller":
		err = controllerCmd(os.Args[2:])
	case "qualify":
		err = qualifyCmd(os.Args[2:])
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "aluad: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	exit(os.Args[1], err)
}
