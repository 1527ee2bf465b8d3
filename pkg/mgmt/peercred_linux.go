package mgmt

import (
	"fmt"
	"net"
	"os/user"
	"strconv"
	"syscall"
)

// peerCred names the process at the other end of a Unix socket.
func peerCred(c net.Conn) string {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return "(unknown peer)"
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return "(unknown peer)"
	}
	var cred *syscall.Ucred
	var cerr error
	raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if cerr != nil || cred == nil {
		return "(unknown peer)"
	}
	name := strconv.Itoa(int(cred.Uid))
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	return fmt.Sprintf("uid %d (%s) pid %d", cred.Uid, name, cred.Pid)
}
