package sandbox

import (
	"errors"
	"os/exec"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// firewallWatch tells whether the host's firewall changed since it was last asked: it
// listens to nf_tables' change notifications, which iptables-nft and nft send for every
// change to any table. With it, the jobs' rules are checked (one iptables-save) only
// after something changed the firewall, instead of before every job with egress.
//
// The notifications are read when asked (takeChanged), not by a goroutine as they come:
// the kernel queues them on the socket before the change's own command returns, so a
// change made just before a check is always seen by it, never left unread in the queue.
type firewallWatch struct {
	fd      int
	changed atomic.Bool
	broken  atomic.Bool // the notifications stopped: every takeChanged is true
}

// watchFirewall starts watching, or says why it cannot (iptables-legacy sends no
// notifications: its rules are then checked before every job).
func watchFirewall() (*firewallWatch, error) {
	out, err := exec.Command("iptables", "--version").Output()
	if err != nil {
		return nil, err
	}
	if !strings.Contains(string(out), "nf_tables") {
		return nil, errors.New("iptables is not the nf_tables one: no change notifications")
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (unix.NFNLGRP_NFTABLES - 1)}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	w := &firewallWatch{fd: fd}
	w.changed.Store(true)
	return w, nil
}

// drain reads every notification queued: any (or notifications lost, ENOBUFS) means the
// firewall may have changed.
func (w *firewallWatch) drain() {
	buf := make([]byte, 64<<10)
	for !w.broken.Load() {
		n, _, err := unix.Recvfrom(w.fd, buf, unix.MSG_DONTWAIT)
		switch {
		case err == unix.EAGAIN:
			return
		case err == unix.EINTR:
		case err == unix.ENOBUFS || (err == nil && n > 0):
			w.changed.Store(true)
		default: // the socket failed (or was closed): check before every job from now on
			w.broken.Store(true)
		}
	}
}

// takeChanged tells whether the firewall changed since the previous call (or the start).
// Its caller serialises the calls (jobNetwork.mu).
func (w *firewallWatch) takeChanged() bool {
	w.drain()
	return w.changed.Swap(false) || w.broken.Load()
}

// markChanged makes the next takeChanged true (a check that could not finish).
func (w *firewallWatch) markChanged() { w.changed.Store(true) }

func (w *firewallWatch) close() {
	unix.Close(w.fd)
	w.fd = -1 // (a later read fails instead of reading a file that reused the number)
}
