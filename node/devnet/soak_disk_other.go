//go:build !linux

package devnet

import (
	"context"
	"errors"
)

// The soak runs jobs, on Linux only.

func (s *soak) fillDisk(context.Context, Fault) {}

func (s *soak) mountHomes() error { return errors.ErrUnsupported }

func (s *soak) unmountHomes() {}
