package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"

	"github.com/gpunex/gpunex/node/api"
)

// jobFile is a job described in a TOML file: gpunex job run -f FILE (docs/api.md, "Job
// files"). Paths are relative to the file's folder.
type jobFile struct {
	Image        string            `toml:"image"`
	ImageArchive string            `toml:"image_archive"`
	Command      []string          `toml:"command"`
	Env          map[string]string `toml:"env"`
	GPUs         int               `toml:"gpus"`
	Hours        float64           `toml:"hours"`
	MaxPrice     usdcText          `toml:"max_price"`
	Model        string            `toml:"model"`
	Region       string            `toml:"region"`
	Tier         string            `toml:"tier"`
	Egress       bool              `toml:"egress"`
	Provider     string            `toml:"provider"`
	Offer        string            `toml:"offer"`
	Tries        int               `toml:"tries"`
	Output       string            `toml:"output"`
	Inputs       []string          `toml:"inputs"`
	Ports        []int             `toml:"ports"`
}

// usdcText is an amount of USDC written as a string ("2.50") or a number (2.5).
type usdcText string

func (u *usdcText) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case string:
		*u = usdcText(x)
	case int64:
		*u = usdcText(strconv.FormatInt(x, 10))
	case float64:
		*u = usdcText(strconv.FormatFloat(x, 'f', -1, 64))
	default:
		return fmt.Errorf("an amount of USDC, such as \"2.50\", not %T", v)
	}
	return nil
}

// decodeTOMLFile reads the TOML file at path into v. A key v has no field for is an error
// that names it, and hint (where the format is described).
func decodeTOMLFile(path string, v any, hint string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	md, err := toml.Decode(string(b), v)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if undec := md.Undecoded(); len(undec) > 0 {
		keys := make([]string, len(undec))
		for i, k := range undec {
			keys[i] = k.String()
		}
		return fmt.Errorf("%s: unknown fields: %s (%s)", path, strings.Join(keys, ", "), hint)
	}
	return nil
}

// readJobFile reads a job file, its paths made absolute against its folder.
func readJobFile(path string) (jobFile, error) {
	var f jobFile
	if err := decodeTOMLFile(path, &f, `see "Job files" in docs/api.md`); err != nil {
		return f, err
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return f, err
	}
	for _, p := range []*string{&f.ImageArchive, &f.Output} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for i, p := range f.Inputs {
		if !filepath.IsAbs(p) {
			f.Inputs[i] = filepath.Join(dir, p)
		}
	}
	return f, nil
}

// fill takes into req, hours and output what the job file says and the command line of
// cmd did not: a flag given overrides the file. An image given on the command line
// replaces the file's image and archive; a provider or an offer there replaces the file's
// placement (provider, offer, model, region, tier, tries), a model there the file's
// provider and offer. Environment variables add to the file's, replacing those of the same
// name; a command after -- replaces the file's, and --input the file's inputs.
func (f jobFile) fill(cmd *cobra.Command, req *api.JobRequest, hours *float64, output *string) {
	set := cmd.Flags().Changed
	if !set("image") && !set("image-archive") {
		req.Image, req.ImageArchive = f.Image, f.ImageArchive
	}
	named := set("provider") || set("offer")
	if !named && !set("model") {
		req.Provider, req.Offer = f.Provider, f.Offer
	}
	if !named {
		if !set("model") {
			req.Model = f.Model
		}
		if !set("region") {
			req.Region = f.Region
		}
		if !set("tier") {
			req.Tier = f.Tier
		}
		if !set("tries") {
			req.Tries = f.Tries
		}
	}
	if !set("gpus") && f.GPUs != 0 {
		req.GPUs = f.GPUs
	}
	if !set("max-hours") {
		*hours = f.Hours
	}
	if !set("max-price") {
		req.MaxPrice = string(f.MaxPrice)
	}
	if !set("egress") {
		req.Egress = f.Egress
	}
	if !set("output") {
		*output = f.Output
	}
	if !set("input") {
		req.Inputs = f.Inputs
	}
	if !set("port") {
		req.Ports = f.Ports
	}
	if len(req.Args) == 0 {
		req.Args = f.Command
	}
	var env []string
	for k, v := range f.Env {
		if !slices.ContainsFunc(req.Env, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
			env = append(env, k+"="+v)
		}
	}
	slices.Sort(env)
	req.Env = append(env, req.Env...)
}
