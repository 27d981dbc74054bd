package modlicense

import (
	"os"
	"path/filepath"
	"testing"
)

// TestClassify: each licence by its text, and what is none of them.
func TestClassify(t *testing.T) {
	for file, want := range map[string]string{"../../../LICENSE": "Apache-2.0"} {
		data, err := os.ReadFile(filepath.Clean(file))
		if err != nil {
			t.Fatal(err)
		}
		if got := Classify(data); got != want {
			t.Errorf("%s: %q, want %s", file, got, want)
		}
	}
	for text, want := range map[string]string{
		"Permission is hereby granted, free of charge, to any person":                                                    "MIT",
		"Redistribution and use in source and binary forms ... Neither the name of Google":                               "BSD-3-Clause",
		"Redistribution and use in source and binary forms, with or\n   without modification":                            "BSD-2-Clause",
		"Mozilla Public License Version 2.0":                                                                             "MPL-2.0",
		"GNU GENERAL PUBLIC LICENSE Version 3":                                                                           "",
		"Permission to use, copy, modify, and/or distribute this software for any purpose with or without fee is hereby": "ISC",
	} {
		if got := Classify([]byte(text)); got != want {
			t.Errorf("%q: %q, want %q", text, got, want)
		}
	}
	if p := Problems([]Module{{Path: "example.com/gpl", Licence: "GPL-3.0"}, {Path: "example.com/none"}}); len(p) != 2 {
		t.Errorf("problems of a GPL module and one without a licence: %v", p)
	}
}
