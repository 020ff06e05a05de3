package nshold

import (
	"bufio"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

func init() {
	if len(os.Args) == 2 && os.Args[1] == Arg {
		os.Exit(hold())
	}
}

// hold brings up the loopback of its new network namespace (runc does it only in the
// namespaces it makes itself), says it is ready, and waits for its standard input to close.
func hold() int {
	if err := loopbackUp(); err != nil {
		fmt.Printf("bring the loopback up: %v\n", err)
		return 1
	}
	fmt.Println(Ready)
	bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifr struct {
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(ifr.name[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return e
	}
	ifr.flags |= syscall.IFF_UP
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return e
	}
	return nil
}
