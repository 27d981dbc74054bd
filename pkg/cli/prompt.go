package cli

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"golang.org/x/term"
)

// secretInput is how a command takes a secret (a password, a passphrase):
// the first line of --<what>-file, else typed on a terminal without echo
// (twice when confirm), else the environment variable env.
type secretInput struct {
	what    string // "password", "passphrase"
	prompt  string // what the terminal shows first
	env     string
	confirm bool
	// unchanged says what a mismatch of the two entries left as it was.
	unchanged string
}

func readSecret(o *Options, file string, in secretInput) (string, error) {
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		line, _, _ := strings.Cut(string(b), "\n")
		return strings.TrimSuffix(line, "\r"), nil
	case isTerminal(o.In):
		fd := int(o.In.(*os.File).Fd()) //nolint:forcetypeassert // isTerminal checked it
		first, err := promptNoEcho(o, fd, in.prompt+": ")
		if err != nil || !in.confirm {
			return string(first), err
		}
		second, err := promptNoEcho(o, fd, "Again: ")
		if err != nil {
			return "", err
		}
		if !bytes.Equal(first, second) {
			return "", fmt.Errorf("the %ss differ; %s", in.what, in.unchanged)
		}
		return string(first), nil
	case os.Getenv(in.env) != "":
		return os.Getenv(in.env), nil
	}
	return "", fmt.Errorf("no terminal to prompt on: give the %s in --%s-file or %s", in.what, in.what, in.env)
}

func promptNoEcho(o *Options, fd int, prompt string) ([]byte, error) {
	fmt.Fprint(o.ErrOut, prompt)
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(o.ErrOut)
	return b, err
}
