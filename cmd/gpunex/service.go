package main

import (
	"embed"
	"fmt"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node/config"
)

//go:embed units/*.tmpl
var unitTemplates embed.FS

// unitValues fill a unit template.
type unitValues struct {
	Role, User, Binary, Home, StateDirectory string
}

// serviceUnit writes the systemd unit of a role: a provider's runs as root (jobs need it),
// a renter's and a coordinator's unprivileged with systemd's hardening.
func serviceUnit(role, home, binary, user string) (string, error) {
	if role != config.RoleProvider && role != config.RoleRenter && role != config.RoleCoordinator {
		return "", fmt.Errorf("--role %q: provider, renter or coordinator", role)
	}
	home = filepath.Clean(home)
	state, ok := strings.CutPrefix(home, "/var/lib/")
	if !ok || state == "" || strings.Contains(state, "/") {
		return "", fmt.Errorf("--home %s: the unit keeps the home as systemd's state directory, a folder directly under /var/lib", home)
	}
	if !filepath.IsAbs(binary) {
		return "", fmt.Errorf("--binary %s: an absolute path", binary)
	}
	name := "hardened.service.tmpl"
	if role == config.RoleProvider {
		name = "provider.service.tmpl"
	}
	t, err := template.ParseFS(unitTemplates, "units/"+name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = t.Execute(&b, unitValues{Role: role, User: user, Binary: binary, Home: home, StateDirectory: state})
	return b.String(), err
}

func serviceCommand() *cobra.Command {
	c := &cobra.Command{Use: "service", Short: "Run the node as a systemd service (docs/operations.md)"}
	var role, homeDir, binary, user string
	unit := &cobra.Command{
		Use:   "unit --role provider|renter|coordinator [--home /var/lib/gpunex] [--binary /usr/bin/gpunex] [--user gpunex]",
		Short: "Print the systemd unit of a role: a provider's runs as root (jobs need it), the others unprivileged and hardened",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := serviceUnit(role, homeDir, binary, user)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), u)
			return err
		},
	}
	unit.Flags().StringVar(&role, "role", "", "provider, renter or coordinator")
	unit.Flags().StringVar(&homeDir, "home", "/var/lib/gpunex", "the node's home (a folder directly under /var/lib)")
	unit.Flags().StringVar(&binary, "binary", "/usr/bin/gpunex", "the gpunex binary")
	unit.Flags().StringVar(&user, "user", "gpunex", "the system user of a renter or coordinator (a provider runs as root)")
	c.AddCommand(unit)
	return c
}
