package tcmu

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
)

// errTimeout: Receive's periodic wake-up (so a closed front end stops).
var errTimeout = errors.New("tcmu: netlink receive timeout")

const (
	netlinkGeneric   = 16
	solNetlink       = 270
	netlinkAddMember = 1
)

// Netlink is a socket on the TCMU generic netlink family, joined to its
// config group: it receives device added / removed / reconfigured events
// and sends the replies the kernel waits for when reply support is on.
type Netlink struct {
	fd     int
	family uint16
	group  uint32
	mu     sync.Mutex
	seq    uint32
}

// OpenNetlink resolves the family and joins its config group.
func OpenNetlink() (*Netlink, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, netlinkGeneric)
	if err != nil {
		return nil, fmt.Errorf("tcmu: netlink socket: %w", err)
	}
	n := &Netlink{fd: fd}
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		n.Close()
		return nil, fmt.Errorf("tcmu: netlink bind: %w", err)
	}
	if err := n.send(getFamilyMessage(n.nextSeq(), FamilyName)); err != nil {
		n.Close()
		return nil, err
	}
	buf := make([]byte, 1<<16)
	k, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("tcmu: netlink family lookup: %w", err)
	}
	id, groups, err := parseFamily(buf[:k])
	if err != nil {
		n.Close()
		return nil, err
	}
	g, ok := groups[ConfigGroup]
	if !ok {
		n.Close()
		return nil, fmt.Errorf("tcmu: family %s has no %q multicast group", FamilyName, ConfigGroup)
	}
	n.family, n.group = id, g
	tv := syscall.Timeval{Usec: 500000}
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		n.Close()
		return nil, fmt.Errorf("tcmu: netlink receive timeout: %w", err)
	}
	if err := syscall.SetsockoptInt(fd, solNetlink, netlinkAddMember, int(g)); err != nil {
		n.Close()
		return nil, fmt.Errorf("tcmu: joining the %s group: %w", ConfigGroup, err)
	}
	return n, nil
}

func (n *Netlink) nextSeq() uint32 {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seq++
	return n.seq
}

func (n *Netlink) send(b []byte) error {
	if err := syscall.Sendto(n.fd, b, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return fmt.Errorf("tcmu: netlink send: %w", err)
	}
	return nil
}

// Receive blocks for the next datagram and returns its TCMU events.
func (n *Netlink) Receive() ([]Event, error) {
	buf := make([]byte, 1<<16)
	k, _, err := syscall.Recvfrom(n.fd, buf, 0)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return nil, errTimeout
	}
	if err != nil {
		return nil, err
	}
	return ParseMessages(buf[:k], n.family)
}

// Reply answers an event with a status (0, or a negative errno).
func (n *Netlink) Reply(e Event, status int32) error {
	b, err := ReplyMessage(n.family, n.nextSeq(), e, status)
	if err != nil {
		return err
	}
	return n.send(b)
}

// Close closes the socket (a blocked Receive returns).
func (n *Netlink) Close() error {
	return syscall.Close(n.fd)
}
