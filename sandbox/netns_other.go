//go:build !linux

package sandbox

import "errors"

var errNoNetns = errors.New("network namespaces need Linux")

func pinNetns(src, pin string) error { return errNoNetns }
func unpinNetns(pin string) error    { return errNoNetns }
