package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// HostRAMGB is the machine's memory in GiB, rounded to the nearest (MemTotal of
// /proc/meminfo, a little under what is installed: the kernel keeps some); 0 where it
// cannot be read.
func HostRAMGB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return int((kb + (1<<20)/2) >> 20)
		}
	}
	return 0
}
