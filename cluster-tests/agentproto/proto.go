// Package agentproto is the wire protocol between the QEMU lab
// (cluster-tests/qemulab, on the host) and the guest agent
// (cluster-tests/agent, PID 1 in each guest): one JSON Request per line
// to the guest, one JSON Reply per line back, matched by ID; requests
// run concurrently, so replies may come in any order.
package agentproto

// Request is one command for the guest.
type Request struct {
	ID int64 `json:"id"`
	// Op: "sh" (default) runs Cmd with /bin/sh -c; "write" writes Data to
	// Path; "ping" answers at once; "clock" answers the guest's time (Unix
	// ns) in Out; "sample" starts writing to Path, every TimeoutMS, the
	// completed reads and writes of the block devices whose stat files
	// match the globs Cmd (space-separated; /sys/block/sd*/stat and
	// /sys/block/dm-*/stat when empty), a line "UNIX_NS PREV_NS DEV READS
	// WRITES" when they change (between the previous read and this one);
	// "sample-stop" ends it (Out: the lines written).
	Op        string `json:"op,omitempty"`
	Cmd       string `json:"cmd,omitempty"`
	Path      string `json:"path,omitempty"`
	Data      []byte `json:"data,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
}

// Reply answers one Request. RC is the command's exit code (2 for a bad
// request); Out its combined output.
type Reply struct {
	ID  int64  `json:"id"`
	RC  int    `json:"rc"`
	Out string `json:"out,omitempty"`
	Err string `json:"err,omitempty"`
	// MS is how long the command ran, by the guest's clock.
	MS int64 `json:"ms"`
}
