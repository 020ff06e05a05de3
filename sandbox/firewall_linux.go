package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// firewallWatch tells whether the host's firewall changed since it was last asked: it
// listens to nf_tables' change notifications, which iptables-nft and nft send for every
// change to any table. With it, the jobs' rules are checked (one iptables-save) only
// after something changed the firewall, instead of before every job with egress.
type firewallWatch struct {
	sock    *os.File
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
	w := &firewallWatch{sock: os.NewFile(uintptr(fd), "nftables-notifications")}
	w.changed.Store(true)
	go w.read()
	return w, nil
}

func (w *firewallWatch) read() {
	buf := make([]byte, 64<<10)
	for {
		_, err := w.sock.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return
		}
		// A notification, or notifications lost (ENOBUFS): either way the firewall may
		// have changed.
		w.changed.Store(true)
		if err != nil && !errors.Is(err, unix.ENOBUFS) {
			w.broken.Store(true)
			return
		}
	}
}

// takeChanged tells whether the firewall changed since the previous call (or the start).
func (w *firewallWatch) takeChanged() bool { return w.changed.Swap(false) || w.broken.Load() }

// markChanged makes the next takeChanged true (a check that could not finish).
func (w *firewallWatch) markChanged() { w.changed.Store(true) }

func (w *firewallWatch) close() { w.sock.Close() }
