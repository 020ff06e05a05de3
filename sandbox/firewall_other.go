//go:build !linux

package sandbox

import "errors"

type firewallWatch struct{}

func watchFirewall() (*firewallWatch, error) {
	return nil, errors.New("firewall notifications need Linux")
}

func (w *firewallWatch) takeChanged() bool { return true }
func (w *firewallWatch) markChanged()      {}
func (w *firewallWatch) close()            {}
