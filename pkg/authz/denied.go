package authz

import "fmt"

// Denied returns msg, the refusal of a request whose authorization question
// was not allowed, followed by what the authorizer said of it: its reason
// and, when it failed, its error.
func Denied(msg, reason string, err error) string {
	if reason != "" {
		msg += ": " + reason
	}
	if err != nil {
		msg += fmt.Sprintf(" (authorizer error: %v)", err)
	}
	return msg
}
