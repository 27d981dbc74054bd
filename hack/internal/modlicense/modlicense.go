// Package modlicense classifies the licence of every module a Go program
// links, from the module cache (no network): the report `make licenses`
// prints, and the licences an image's SBOM declares.
package modlicense

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Module is a dependency and what its licence file says.
type Module struct {
	Path, Version string
	// Licence is the SPDX identifier of its licence, "" when unknown.
	Licence string
	// File is the licence file, relative to the module's root.
	File string
}

// Compatible are the licences under which a module may be linked into a
// program distributed under Apache-2.0: permissive ones, and MPL-2.0, whose
// copyleft stays with its own files (Talos's machinery is MPL-2.0).
var Compatible = []string{"Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "MIT", "MPL-2.0"}

// fingerprints classify a licence text, normalised to single spaces and
// lower case, by phrases only its licence has; the first match wins.
var fingerprints = []struct {
	spdx    string
	phrases []string
}{
	{"Apache-2.0", []string{"apache license", "version 2.0"}},
	{"MPL-2.0", []string{"mozilla public license", "version 2.0"}},
	{"MIT", []string{"permission is hereby granted, free of charge"}},
	{"ISC", []string{"permission to use, copy, modify, and/or distribute this software for any purpose with or without fee"}},
	{"ISC", []string{"permission to use, copy, modify, and distribute this software for any purpose with or without fee"}},
	{"BSD-3-Clause", []string{"redistribution and use in source and binary forms", "neither the name"}},
	{"BSD-3-Clause", []string{"redistribution and use in source and binary forms", "names of its contributors may not be used"}},
	{"BSD-2-Clause", []string{"redistribution and use in source and binary forms"}},
}

// licenceFiles are the names a module's licence goes by.
var licenceFiles = regexp.MustCompile(`(?i)^(licen[cs]e|copying)([.-](md|txt|apache|mit))?$`)

var space = regexp.MustCompile(`\s+`)

// Classify is the SPDX identifier of text, "" when no fingerprint matches.
func Classify(text []byte) string {
	norm := strings.ToLower(space.ReplaceAllString(string(text), " "))
	for _, f := range fingerprints {
		if !slices.ContainsFunc(f.phrases, func(p string) bool { return !strings.Contains(norm, p) }) {
			return f.spdx
		}
	}
	return ""
}

// LicenceOf classifies the licence file at the module's root.
func LicenceOf(dir string) (spdx, file string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", "", err
	}
	for _, e := range entries {
		if e.IsDir() || !licenceFiles.MatchString(e.Name()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", "", err
		}
		if spdx := Classify(data); spdx != "" {
			return spdx, e.Name(), nil
		}
		file = e.Name()
	}
	return "", file, nil
}

// Modules lists the modules the packages of patterns link, but the main
// one, when built in dir ("": here) with env added to the environment
// (GOOS, GOARCH).
func Modules(dir string, env []string, patterns ...string) ([]Module, error) {
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=Module"}, patterns...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	type goModule struct {
		Path, Version, Dir string
		Main               bool
		Replace            *goModule
	}
	seen := map[string]Module{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ Module *goModule }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		m := p.Module
		if m == nil || m.Main {
			continue // the standard library, or Ichor itself
		}
		key := m.Path + "@" + m.Version
		if _, ok := seen[key]; ok {
			continue
		}
		dir, version := m.Dir, m.Version
		if m.Replace != nil {
			dir, version = m.Replace.Dir, m.Replace.Version+" (replacing "+m.Version+")"
		}
		spdx, file, err := LicenceOf(dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		seen[key] = Module{Path: m.Path, Version: version, Licence: spdx, File: file}
	}
	var list []Module
	for _, m := range seen {
		list = append(list, m)
	}
	slices.SortFunc(list, func(a, b Module) int { return cmp.Compare(a.Path, b.Path) })
	return list, nil
}

// Problems are the modules whose licence is unknown or not compatible.
func Problems(list []Module) []string {
	var out []string
	for _, m := range list {
		switch {
		case m.Licence == "":
			out = append(out, fmt.Sprintf("%s %s: no licence file Ichor can classify (found %q)", m.Path, m.Version, m.File))
		case !slices.Contains(Compatible, m.Licence):
			out = append(out, fmt.Sprintf("%s %s: %s is not among %v", m.Path, m.Version, m.Licence, Compatible))
		}
	}
	return out
}
