package itest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	ichorv1 "ichor.dev/ichor/pkg/generated/clientset/versioned/typed/ichor/v1alpha1"
	"ichor.dev/ichor/test/talossim"
)

// CrashBeforeWrite is a controller that dies between a node call and the
// status write recording it: the first status write of the machine at path
// whose body holds marker (a reason, found in JSON and protobuf alike) fails, and so does every request after it, as
// from a process that is gone. crashed is closed then.
type CrashBeforeWrite struct {
	Path, Marker string
	Crashed      chan struct{}
	Once         sync.Once
	Mu           sync.Mutex
	Dead         bool
}

func NewCrashBeforeWrite(ns, machine, marker string) *CrashBeforeWrite {
	return &CrashBeforeWrite{
		Path:    fmt.Sprintf("/apis/ichor.dev/v1alpha1/namespaces/%s/talosmachines/%s/status", ns, machine),
		Marker:  marker,
		Crashed: make(chan struct{}),
	}
}

func (c *CrashBeforeWrite) Wrap(rt http.RoundTripper) http.RoundTripper {
	return RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		c.Mu.Lock()
		dead := c.Dead
		c.Mu.Unlock()
		if dead {
			return nil, errors.New("test fault: the controller crashed")
		}
		if req.URL.Path == c.Path && (req.Method == http.MethodPut || req.Method == http.MethodPatch) && req.Body != nil {
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(c.Marker)) {
				c.Mu.Lock()
				c.Dead = true
				c.Mu.Unlock()
				c.Once.Do(func() { close(c.Crashed) })
				return nil, errors.New("test fault: the controller crashed")
			}
		}
		return rt.RoundTrip(req)
	})
}

type RoundTripFunc func(*http.Request) (*http.Response, error)

func (f RoundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TimesEntered is how many times the node entered phase.
func TimesEntered(n *talossim.Node, phase talossim.Phase) int {
	c := 0
	for _, p := range n.PhaseHistory() {
		if p == phase {
			c++
		}
	}
	return c
}

func MachinesIn(t *testing.T, ns string) ichorv1.TalosMachineInterface {
	return APIClient(t).IchorV1alpha1().TalosMachines(ns)
}
