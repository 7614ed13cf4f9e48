package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// The optional configuration file (--config, WARREN_CONFIG) holds one
// setting a line, named as the flags are:
//
//	# comment
//	amqp-addr = ":5672"
//	max-connections = 1000
//
// Values may be double-quoted (Go string syntax). A flag on the command
// line wins over its WARREN_* environment variable, which wins over the
// file, which wins over the default.

// parseConfigFile reads a configuration file into key → value.
func parseConfigFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make(map[string]string)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want key = value", path, n)
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if strings.HasPrefix(value, `"`) {
			v, err := strconv.Unquote(value)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %s: %w", path, n, key, err)
			}
			value = v
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s:%d: %s set twice", path, n, key)
		}
		out[key] = value
	}
	return out, sc.Err()
}

// applyConfigFile sets, from the --config file, every flag that neither
// the command line nor the environment set. Unknown keys are errors.
func applyConfigFile(cc *cli.Context) error {
	path := cc.String("config")
	if path == "" {
		return nil
	}
	settings, err := parseConfigFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	known := make(map[string]bool)
	for _, f := range serverFlags() {
		for _, name := range f.Names() {
			known[name] = true
		}
	}
	for key, value := range settings {
		if !known[key] || key == "config" {
			return fmt.Errorf("config file %s: unknown setting %q", path, key)
		}
		if cc.IsSet(key) {
			continue
		}
		if err := cc.Set(key, value); err != nil {
			return fmt.Errorf("config file %s: %s: %w", path, key, err)
		}
	}
	return nil
}
