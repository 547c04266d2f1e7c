package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// applyEnvAndFile gives every flag of fs that the command line left unset
// the value of its <prefix><FLAG> environment variable (envNameWith), else
// of its key in the YAML file at path (keys are flag names, dashes or
// underscores; unknown keys are errors), the conventions serve follows:
// flag, then environment, then file, then default.
//
// A flag kept under an old name as well (the same variable, its usage
// "old name of -NEW") is one setting: given on the command line under
// either name it takes neither's environment variable or key; else the
// new name's variable, then the old's, then the new name's key, then the
// old's.
func applyEnvAndFile(fs *flag.FlagSet, prefix string, getenv func(string) string, path string) error {
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
	// The settings: each flag with its old names after it.
	var settings [][]*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || strings.HasPrefix(f.Usage, "old name of -") {
			return
		}
		s := []*flag.Flag{f}
		fs.VisitAll(func(o *flag.Flag) {
			if o != f && sameVariable(o.Value, f.Value) {
				s = append(s, o)
			}
		})
		settings = append(settings, s)
	})
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, s := range settings {
		if slices.ContainsFunc(s, func(f *flag.Flag) bool { return set[f.Name] }) {
			continue
		}
		done, err := applyFrom(fs, s, func(f *flag.Flag) (string, string, bool) {
			name := envNameWith(prefix, f.Name)
			v := getenv(name)
			return v, name, v != ""
		})
		if err != nil {
			return err
		}
		if done {
			continue
		}
		if _, err := applyFrom(fs, s, func(f *flag.Flag) (string, string, bool) {
			for _, k := range []string{f.Name, strings.ReplaceAll(f.Name, "-", "_")} {
				if v, ok := file[k]; ok {
					return fmt.Sprint(v), "config file " + path + ": " + k, true
				}
			}
			return "", "", false
		}); err != nil {
			return err
		}
	}
	return nil
}

// envNameWith is the environment variable of a flag under prefix: prefix,
// then the flag's name in capitals with its dashes as underscores.
func envNameWith(prefix, flag string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// sameVariable reports whether a and b are flags on one variable (the
// flag package's values are pointers to it; any other kind never is).
func sameVariable(a, b flag.Value) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Kind() == reflect.Pointer && vb.Kind() == reflect.Pointer && va.Type() == vb.Type() && va.Pointer() == vb.Pointer()
}

// applyFrom sets the setting s from the first of its names that source
// has a value for, and reports whether one had.
func applyFrom(fs *flag.FlagSet, s []*flag.Flag, source func(*flag.Flag) (v, where string, ok bool)) (bool, error) {
	for _, f := range s {
		v, where, ok := source(f)
		if !ok {
			continue
		}
		if err := fs.Set(s[0].Name, v); err != nil {
			return true, fmt.Errorf("%s: %v", where, err)
		}
		return true, nil
	}
	return false, nil
}
