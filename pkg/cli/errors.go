package cli

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Explain is err as a person can act on it: for a refusal, what was
// refused and who may; for a conflict, what blocks it; never a stack.
func Explain(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err.Error()
	}
	s := status.Status()
	msg := s.Message
	switch s.Code {
	case http.StatusForbidden:
		if hint := holderHint(msg); hint != "" {
			return msg + "\n" + hint
		}
		return msg + "\nAsk an admin for the role that grants it (kubectl auth can-i lists what you may do)."
	case http.StatusConflict:
		return msg + "\n" + conflictHint(msg)
	case http.StatusUnauthorized:
		return msg + "\nYour credentials were not accepted: check your kubeconfig's user, or sign in again."
	}
	return msg
}

// refusal finds the verb and resource a refusal names: ichor-apiserver's
// (`it needs the "approve" verb on resource "talosmachines", subresource
// "approval"`) or kube-apiserver's RBAC (`cannot create resource
// "talosoperations/start" in API group "ichor.dev"`).
var refusal = []*regexp.Regexp{
	regexp.MustCompile(`needs the "([a-z]+)" verb on resource "([a-z]+)"(?:, subresource "([a-z-]+)")?`),
	regexp.MustCompile(`cannot ([a-z]+) resource "([a-z]+)(?:/([a-z-]+))?" in API group "ichor\.dev"`),
}

// holderHint names the lowest role that holds what a refusal message says
// is missing, from Ichor's roles (artifacts/roles.yaml).
func holderHint(msg string) string {
	for _, re := range refusal {
		m := re.FindStringSubmatch(msg)
		if m == nil {
			continue
		}
		verb, resource := m[1], m[2]
		if m[3] != "" {
			resource += "/" + m[3]
		}
		role, group := lowestHolder(verb, resource)
		if role == "" {
			return fmt.Sprintf("No Ichor role holds %q on %s.", verb, resource)
		}
		return fmt.Sprintf("The %s group (ClusterRole %s) holds %q on %s: ask an admin for that role.", group, role, verb, resource)
	}
	return ""
}

// conflictHints say, for each state a 409 names, what to do about it; the
// server's message already says what the state is.
var conflictHints = []struct {
	re   *regexp.Regexp
	hint string
}{
	{regexp.MustCompile(`talosoperations\.ichor\.dev "[^"]*": it was already started by`),
		"An operation runs once: to run it again, create a new TalosOperation with the same spec."},
	{regexp.MustCompile(`machinereclaims\.ichor\.dev "[^"]*": it was already started by`),
		"A reclaim runs once: to try again, create a new MachineReclaim with the same spec."},
	{regexp.MustCompile(`it is not a configured member of a cluster`),
		"Wait until the machine is configured (ichor status shows it), then download again."},
	{regexp.MustCompile(`it has no configured control plane yet`),
		"Wait until a control plane is configured: ichor wait taloscluster/NAME --for Ready."},
	{regexp.MustCompile(`it was deleted before the controller answered it`),
		"Is ichor-controller running? Download again once it is."},
	{regexp.MustCompile(`the object has been modified; please apply your changes to the latest version`),
		"Someone changed it meanwhile: read it again, and retry your change on what it is now."},
	{regexp.MustCompile(`^Apply failed with \d+ conflicts?`),
		"Another field manager owns those fields: leave them out of your apply, or take them over with --force-conflicts."},
	{regexp.MustCompile(`try again$`), "Run the command again."},
}

// conflictHint is what to do about the conflict msg reports.
func conflictHint(msg string) string {
	for _, h := range conflictHints {
		if h.re.MatchString(msg) {
			return h.hint
		}
	}
	return "The object's state does not allow it now; see kubectl describe for its conditions and Events."
}
