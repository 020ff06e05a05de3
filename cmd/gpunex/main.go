// Command gpunex is the gpunex node: the daemon (`gpunex node run`) and its command-line
// client, plus `gpunex devnet`, a whole local marketplace.
package main

import (
	"errors"
	"fmt"
	"os"

	_ "time/tzdata" // availability schedules name IANA zones; do not depend on the host's tzdata

	"github.com/gpunex/gpunex/sandbox"
)

func main() {
	sandbox.RunLoggerIfInvoked() // containerd's shim runs this binary to write job logs
	cmd := rootCommand()
	if err := cmd.Execute(); err != nil {
		var ex exitError
		if errors.As(err, &ex) {
			os.Exit(ex.code)
		}
		fmt.Fprintln(os.Stderr, "gpunex:", err)
		os.Exit(1)
	}
}

// exitError ends the program with a code after the command already said why.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }
