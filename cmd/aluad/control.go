package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/reports"
)

// defaultControl is the control socket of a daemon serving data dir data.
func defaultControl(data string) string {
	if data == "" {
		data = config.Default().Data
	}
	return filepath.Join(data, "aluad.sock")
}

// controlFlags adds --control, --data, --api and --token-file to a client
// subcommand. The control socket is the default; --api (or ALUAD_API)
// reaches the management API over TCP instead, with the token from
// --token-file (or ALUAD_API_TOKEN) when it needs one.
func controlFlags(fs *flag.FlagSet) func() (*api.Client, error) {
	ctl := fs.String("control", "", "control socket of the running aluad (default: <data>/aluad.sock)")
	data := fs.String("data", "", "data directory of the running aluad (default: aluad-data)")
	apiURL := fs.String("api", os.Getenv("ALUAD_API"), "management API URL instead of the socket, e.g. http://127.0.0.1:8090 (env ALUAD_API)")
	tokenFile := fs.String("token-file", "", "file holding the API's bearer token (env ALUAD_API_TOKEN holds the token itself)")
	return func() (*api.Client, error) {
		if *apiURL != "" {
			tok, err := readToken(*tokenFile)
			if err != nil {
				return nil, err
			}
			return api.NewHTTPClient(*apiURL, tok), nil
		}
		if *ctl != "" {
			return api.NewClient(*ctl), nil
		}
		if *data != "" {
			return api.NewClient(defaultControl(*data)), nil
		}
		return findLocal(local{
			sockets: []string{defaultControl(""), localLink()},
			api:     "http://" + api.DefaultAPI,
			token:   func() (string, error) { return readToken(*tokenFile) },
		})
	}
}

// local is where a client with no --control, --data or --api looks for a
// daemon, in order: control sockets (the default data directory's, then
// the link the last 'aluad serve' left in the user's runtime directory),
// then the management API at its default address.
type local struct {
	sockets []string
	api     string
	token   func() (string, error)
}

// findLocal returns a client of the first daemon that answers, or an error
// that lists where it looked.
func findLocal(l local) (*api.Client, error) {
	var tried []string
	for _, p := range l.sockets {
		if c, err := net.DialTimeout("unix", p, time.Second); err == nil {
			c.Close()
			return api.NewClient(p), nil
		}
		tried = append(tried, p)
	}
	host := strings.TrimPrefix(strings.TrimPrefix(l.api, "http://"), "https://")
	if c, err := net.DialTimeout("tcp", host, time.Second); err == nil {
		c.Close()
		tok, err := l.token()
		if err != nil {
			return nil, err
		}
		return api.NewHTTPClient(l.api, tok), nil
	}
	tried = append(tried, l.api)
	return nil, fmt.Errorf("no aluad answering on %s (is 'aluad serve' running? name its --control, --data or --api)",
		strings.Join(tried, ", "))
}

// localLink is the control socket link 'aluad serve' leaves for clients
// run from any directory: $XDG_RUNTIME_DIR/aluad.sock, or aluad-<uid>.sock
// in the temporary directory.
func localLink() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "aluad.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("aluad-%d.sock", os.Getuid()))
}

// publishLocal points the local link at a serving daemon's control
// socket, unless another daemon's link answers there; the returned func
// removes the link if it is still this daemon's.
func publishLocal(ctl string) func() {
	abs, err := filepath.Abs(ctl)
	if err != nil {
		return func() {}
	}
	link := localLink()
	if c, err := net.DialTimeout("unix", link, time.Second); err == nil {
		c.Close()
		return func() {} // another daemon answers there; leave it
	}
	os.Remove(link)
	if os.Symlink(abs, link) != nil {
		return func() {}
	}
	return func() {
		if dst, err := os.Readlink(link); err == nil && dst == abs {
			os.Remove(link)
		}
	}
}

// readToken reads a bearer token from a file (first line, trimmed), or
// from ALUAD_API_TOKEN when no file is named.
func readToken(path string) (string, error) {
	if path == "" {
		return os.Getenv("ALUAD_API_TOKEN"), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// outputFlag adds -o text|json.
func outputFlag(fs *flag.FlagSet) func() (bool, error) {
	o := fs.String("o", "text", "output: text (tables) or json")
	return func() (bool, error) {
		switch *o {
		case "text":
			return false, nil
		case "json":
			return true, nil
		}
		return false, fmt.Errorf("-o %q: want text or json", *o)
	}
}

func move(args []string) error {
	fs := newFlags("move")
	lun := fs.Int64("lun", -1, "LUN to move")
	to := fs.String("to", "", "node to move it to")
	output := outputFlag(fs)
	client := controlFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	js, err := output()
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *lun < 0 || *to == "" {
		return fmt.Errorf("usage: aluad move --lun N --to NODE")
	}
	cl, err := client()
	if err != nil {
		return err
	}
	c, err := cl.Move(uint64(*lun), *to)
	if err != nil {
		return err
	}
	if js {
		return printJSON(c)
	}
	fmt.Printf("LUN %d moved %s -> %s (%s); I/O held %v; UA 2A/06 queued on every nexus\n",
		*lun, c.From, c.To, c.Cause, c.Stop.Round(time.Microsecond))
	return nil
}

func luns(args []string) error {
	cl, js, err := viewCmd("luns", args)
	if err != nil {
		return err
	}
	ls, err := cl.LUNs()
	if err != nil {
		return err
	}
	if js {
		return printJSON(ls)
	}
	return renderLUNs(os.Stdout, ls)
}

func report(args []string) error {
	if len(args) > 0 && args[0] == "clear" {
		return reportClear(args[1:])
	}
	cl, js, err := viewCmd("report", args)
	if err != nil {
		return err
	}
	rs, err := cl.Reports()
	if err != nil {
		return err
	}
	if js {
		if rs == nil {
			rs = []reports.Report{}
		}
		return printJSON(rs)
	}
	return reports.Render(os.Stdout, rs, time.Now())
}

// reportClear is "aluad report clear": the operator clears a latched
// report (Path Flapping of a LUN, Host Type Incorrect of a host, Node
// Unstable of a node).
func reportClear(args []string) error {
	fs := newFlags("report clear")
	cond := fs.String("condition", "", "path-flapping (with --lun), host-type-incorrect (with --host) or node-unstable (with --node)")
	lun := fs.Int64("lun", -1, "the LUN (path-flapping)")
	host := fs.String("host", "", "the host (host-type-incorrect)")
	node := fs.String("node", "", "the node (node-unstable)")
	client := controlFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	req := api.ClearRequest{Condition: *cond, Host: *host, Node: *node}
	switch *cond {
	case string(ownership.PathFlapping):
		if *lun < 0 {
			return fmt.Errorf("report clear --condition path-flapping needs --lun")
		}
		req.LUN = uint64(*lun)
	case string(ownership.HostTypeIncorrect):
		if *host == "" {
			return fmt.Errorf("report clear --condition host-type-incorrect needs --host")
		}
	case string(ownership.NodeUnstable):
		if *node == "" {
			return fmt.Errorf("report clear --condition node-unstable needs --node")
		}
	default:
		return fmt.Errorf("usage: aluad report clear --condition path-flapping --lun N | --condition host-type-incorrect --host H | --condition node-unstable --node X")
	}
	cl, err := client()
	if err != nil {
		return err
	}
	if err := cl.ClearReport(req); err != nil {
		return err
	}
	fmt.Printf("cleared %s\n", *cond)
	return nil
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func fault(args []string) error {
	fs := newFlags("fault")
	node := fs.String("node", "", "node (power-loss, panic, crash, restart)")
	port := fs.String("port", "", "target port name or relative id (port-*, cable-*, path-*, delay)")
	ini := fs.String("initiator", "", "initiator IQN (path-*, and delay on one path)")
	delay := fs.Duration("delay", 0, "added latency (delay; 0 removes it)")
	output := outputFlag(fs)
	client := controlFlags(fs)
	if isHelp(args) {
		return flag.ErrHelp
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return fmt.Errorf("usage: aluad fault KIND [--node N] [--port P] [--initiator IQN] [--delay D] (KIND: %s)",
			strings.Join(api.FaultKinds, ", "))
	}
	kind := args[0]
	if !slices.Contains(api.FaultKinds, kind) {
		return fmt.Errorf("unknown fault %q (%s)", kind, strings.Join(api.FaultKinds, ", "))
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	cl, err := client()
	if err != nil {
		return err
	}
	js, err := output()
	if err != nil {
		return err
	}
	res, err := cl.Inject(api.Fault{Kind: kind, Node: *node, Port: *port, Initiator: *ini, Delay: *delay})
	if err != nil {
		return err
	}
	if js {
		return printJSON(res)
	}
	fmt.Printf("injected %s", kind)
	if c := res.Change; c != nil && len(c.Lost) > 0 {
		for _, l := range c.Lost {
			fmt.Printf("; LUN %d lost %d acknowledged blocks (mirroring off)", l.LUN, l.Blocks)
		}
	}
	fmt.Println()
	return nil
}
