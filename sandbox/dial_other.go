//go:build !linux

package sandbox

import (
	"context"
	"net"
	"os"
)

// jobNetNamespaces: jobs run on Linux only.
type jobNetNamespaces struct{}

func (n *jobNetNamespaces) get(id string, pid func() (int, error)) (*os.File, error) {
	return nil, errNoNetns
}
func (n *jobNetNamespaces) forget(id string) {}
func (n *jobNetNamespaces) closeAll()        {}

func dialIn(ctx context.Context, ns *os.File, addr string) (net.Conn, error) { return nil, errNoNetns }

func isRefused(err error) bool { return false }
