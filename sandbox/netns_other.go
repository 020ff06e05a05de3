//go:build !linux

package sandbox

import "errors"

var errNoNetns = errors.New("network namespaces need Linux")

func pinNetns(src, pin string) error { return errNoNetns }
func unpinNetns(pin string) error    { return errNoNetns }

func holdNamespaces(exe string, userns bool, base uint32, userPin, netPin string) error {
	return errNoNetns
}

func processAlive(pid int) bool { return true }

func socketPeerPID(address string) (int, error) { return 0, errNoNetns }

func setThreadPriority(nice int) error { return nil }
