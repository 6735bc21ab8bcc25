package loadgen

import "syscall"

// ipBindAddressNoPort is IP_BIND_ADDRESS_NO_PORT of <linux/in.h> (Linux 4.2), which the
// syscall package does not name.
const ipBindAddressNoPort = 24

// bindNoPort asks the kernel to pick a connection's source port at connect rather than
// at bind. A bind with port 0 must choose a port no other socket on that address holds,
// so one source address would give at most the ephemeral range (~28,000 ports) however
// many destinations there are; at connect the port need only make the 4-tuple unique,
// and ports in TIME_WAIT may be reused on loopback (net.ipv4.tcp_tw_reuse=2).
func bindNoPort(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
