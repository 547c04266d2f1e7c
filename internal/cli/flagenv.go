package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// applyEnvAndFile gives every flag of fs that the command line left unset
// the value of its HARBINGER_<FLAG> environment variable, else of its key
// in the YAML file at path (keys are flag names, dashes or underscores;
// unknown keys are errors), the conventions serve follows: flag, then
// environment, then file, then default.
func applyEnvAndFile(fs *flag.FlagSet, getenv func(string) string, path string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var file map[string]any
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		if err := dec.Decode(&file); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("config file %s: %v", path, err)
		}
		for k := range file {
			if fs.Lookup(strings.ReplaceAll(k, "_", "-")) == nil {
				return fmt.Errorf("config file %s: unknown key %q", path, k)
			}
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] || f.Name == "config" {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %v", envName(f.Name), e)
			}
			return
		}
		for _, k := range []string{f.Name, strings.ReplaceAll(f.Name, "-", "_")} {
			if v, ok := file[k]; ok {
				if e := fs.Set(f.Name, fmt.Sprint(v)); e != nil {
					err = fmt.Errorf("config file %s: %s: %v", path, k, e)
				}
				return
			}
		}
	})
	return err
}
