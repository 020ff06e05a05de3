//go:build !linux

package sandbox

import "errors"

var errNoNetns = errors.New("network namespaces need Linux")

type pinner struct{}

func newPinner(address string) (*pinner, error)  { return nil, nil }
func (p *pinner) close()                         {}
func (p *pinner) pinNetns(src, pin string) error { return errNoNetns }
func (p *pinner) unpinNetns(pin string) error    { return errNoNetns }

func (p *pinner) holdNamespaces(exe string, userns bool, base uint32, userPin, netPin string) error {
	return errNoNetns
}

func processAlive(pid int) bool { return true }

func socketPeerPID(address string) (int, error) { return 0, errNoNetns }

func setThreadPriority(nice int) error { return nil }
