package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"strconv"
	"strings"

	"github.com/gpunex/gpunex/protocol"
)

// The application's questions, asked on a terminal by `gpunex apply`.

// asker asks questions on a terminal, asking again until the answer is valid.
type asker struct {
	in  *bufio.Reader
	out io.Writer
}

func (a asker) ask(question, def string, check func(string) error) (string, error) {
	for {
		if def != "" {
			fmt.Fprintf(a.out, "%s [%s]: ", question, def)
		} else {
			fmt.Fprintf(a.out, "%s: ", question)
		}
		line, err := a.in.ReadString('\n')
		if err != nil && (err != io.EOF || line == "") {
			return "", fmt.Errorf("no answer to %q: %w", question, err)
		}
		ans := strings.TrimSpace(line)
		if ans == "" {
			ans = def
		}
		if err := check(ans); err != nil {
			fmt.Fprintf(a.out, "  %v\n", err)
			continue
		}
		return ans, nil
	}
}

func required(s string) error {
	if s == "" {
		return errors.New("required")
	}
	return nil
}

func optional(string) error { return nil }

func intIn(lo, hi int) func(string) error {
	return func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v < lo || v > hi {
			return fmt.Errorf("a whole number from %d to %d", lo, hi)
		}
		return nil
	}
}

func gbps(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0 && v <= 1000) {
		return errors.New("a number of Gbps above 0, at most 1000 (e.g. 1, 2.5, 10)")
	}
	return nil
}

func yesNo(s string) error {
	switch strings.ToLower(s) {
	case "y", "yes", "n", "no":
		return nil
	}
	return errors.New("yes or no")
}

// askApplication asks every question of the application, checking each answer.
func askApplication(in *bufio.Reader, out io.Writer, models *protocol.ModelCatalogue) (applicationFile, error) {
	a := asker{in, out}
	var f applicationFile
	var err error
	fmt.Fprintln(out, "gpunex provider application (press Enter to accept a [default])")
	if f.Name, err = a.ask("Full legal name", "", required); err != nil {
		return f, err
	}
	if f.Email, err = a.ask("E-mail", "", func(s string) error {
		if addr, err := mail.ParseAddress(s); err != nil || addr.Address != s {
			return errors.New("an e-mail address such as name@example.org")
		}
		return nil
	}); err != nil {
		return f, err
	}
	if f.Company, err = a.ask("Company (optional)", "", optional); err != nil {
		return f, err
	}
	for {
		var g protocol.ApplicationGPU
		fmt.Fprintf(out, "GPU entry %d (supported: %s; another model is reviewed case by case)\n", len(f.GPUs)+1, supportedModels(models))
		model, err := a.ask("  Model", "H100-80GB", required)
		if err != nil {
			return f, err
		}
		g.Model = protocol.NormalizeModel(model)
		if !models.Supported(g.Model) {
			fmt.Fprintf(out, "  %s is not on the supported list: it will be reviewed case by case\n", g.Model)
		}
		fields := []struct {
			q, def string
			check  func(string) error
			set    func(string)
		}{
			{"  Quantity", "1", intIn(1, protocol.MaxGPUsPerItem), func(s string) { g.Count, _ = strconv.Atoi(s) }},
			{"  Host system RAM (GB)", "256", intIn(1, 65536), func(s string) { g.HostRAMGB, _ = strconv.Atoi(s) }},
			{"  Internet upload (Gbps)", "1", gbps, func(s string) { g.UpGbps, _ = strconv.ParseFloat(s, 64) }},
			{"  Internet download (Gbps)", "1", gbps, func(s string) { g.DownGbps, _ = strconv.ParseFloat(s, 64) }},
			{"  Availability (24/7, or e.g. \"mon-fri 08:00-20:00 (Europe/Paris)\")", "24/7", func(s string) error {
				_, err := protocol.ParseAvailability(s)
				return err
			}, func(s string) { g.Availability = s }},
			{"  City", "", required, func(s string) { g.Location.City = s }},
			{"  Country (two-letter code)", "FR", func(s string) error {
				if len(s) != 2 || strings.ToUpper(s) != s {
					return errors.New("a two-letter ISO code in capitals, e.g. FR, DE, US")
				}
				return nil
			}, func(s string) { g.Location.Country = s }},
			{"  Marketplace region", "eu-west", required, func(s string) { g.Location.Region = protocol.NormalizeRegion(s) }},
		}
		for _, fl := range fields {
			ans, err := a.ask(fl.q, fl.def, fl.check)
			if err != nil {
				return f, err
			}
			fl.set(ans)
		}
		f.GPUs = append(f.GPUs, g)
		more, err := a.ask("Another GPU entry? (yes/no)", "no", yesNo)
		if err != nil {
			return f, err
		}
		if strings.HasPrefix(strings.ToLower(more), "n") {
			break
		}
	}
	ups, err := a.ask("UPS (uninterruptible power supply)? (yes/no)", "no", yesNo)
	if err != nil {
		return f, err
	}
	f.UPS = strings.HasPrefix(strings.ToLower(ups), "y")
	months, err := a.ask("Commitment period in months", "12", intIn(1, protocol.MaxCommitmentMonths))
	if err != nil {
		return f, err
	}
	f.CommitmentMonths, _ = strconv.Atoi(months)
	if f.MaintenanceNotes, err = a.ask("Maintenance notes (optional)", "", optional); err != nil {
		return f, err
	}
	// The record's own checks, in case a rule is not covered above.
	if form := f.form(); form.ValidateForm() != nil {
		return f, form.ValidateForm()
	}
	return f, nil
}
