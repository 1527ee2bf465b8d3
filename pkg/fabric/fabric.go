// Package fabric owns what every front end of the array reports to the
// control path, whichever transport it speaks: its portals (target
// ports), the nexus events of its sessions (login, logout and why), the
// per-nexus exchange statistics, and the wire behaviour a fault gives a
// port. The pure-Go iSCSI target (pkg/iscsi) and the LIO front end
// (tcmu-handler) both produce these; the control path consumes them.
package fabric

import (
	"fmt"
	"time"

	"github.com/aluad/aluad/pkg/scsi"
)

// Portal is one listening address of a target port: an iSCSI target portal
// group with one portal. Each is a SCSI target port of its own.
type Portal struct {
	Addr string // host:port
	TPGT uint16
	// RelativeID is the SCSI relative target port identifier (unique in the array).
	RelativeID uint16
	// Node and Name label the port for logs and events.
	Node, Name string
}

// Event is something the control path wants to know about a nexus.
type Event struct {
	Kind   string // "login", "logout"
	Nexus  scsi.Nexus
	Portal Portal
	// Reason says why a session ended: ReasonLogout when the initiator
	// logged out (an orderly departure); anything else is a fault (the
	// connection was lost, a ping went unanswered, the port went down, a
	// reset or a reinstatement ended it).
	Reason string
}

// ReasonLogout is the Reason of a session ended by a Logout Request.
const ReasonLogout = "logout"

// PathStat is the fabric's view of one I_T nexus (a normal session):
// the commands it answered and their summed exchange time, from the
// command PDU's arrival to its status PDU written to the socket. It
// includes what the device server's time does not: Data-Out waits, the
// TCP send queue and an injected path delay, so a slow path shows here
// and not in the array's response time.
type PathStat struct {
	Nexus     scsi.Nexus
	Exchanges uint64
	Exchange  time.Duration
	Since     time.Time
}

// PortMode is what a target port does on the wire. Each fault has the
// wire behaviour of the real event, since that is what a host's recovery
// times depend on: a host learns of a closed or reset connection at once,
// of a silent one only when its own timer (a NOP-Out timeout) fires.
type PortMode int

const (
	// PortUp serves.
	PortUp PortMode = iota
	// PortDown: the port is disabled. Its connections are closed (FIN)
	// and new ones closed as soon as they are accepted.
	PortDown
	// PortReset: the controller behind the port panicked or reboots. Its
	// connections are reset (RST) and new ones refused (the listening
	// socket is closed) until the port comes back.
	PortReset
	// PortSilent: the port lost power or its cable. Nothing is answered
	// and nothing is closed: commands in flight get no response, open
	// connections stay open and unread, and new connections are accepted
	// (the host's kernel completes the handshake on loopback) and never
	// read. When the port comes back, the connections it held are reset,
	// as a controller that forgot them answers the host's next segment.
	PortSilent
)

var portModeNames = []string{"up", "down", "reset", "silent"}

func (m PortMode) String() string {
	if int(m) < len(portModeNames) {
		return portModeNames[m]
	}
	return fmt.Sprintf("PortMode(%d)", int(m))
}
