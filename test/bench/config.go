package bench

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// Config sizes a run. DefaultConfig is the full benchmark; SmokeConfig the
// tiny one `make test` runs.
type Config struct {
	// Creates is how many objects each create run writes.
	Creates int `json:"creates"`
	// CreateClients are the concurrencies create throughput is measured at.
	CreateClients []int `json:"createClients"`
	// ListSizes are the namespace sizes LIST is measured at; the largest is
	// also the one memory is measured with.
	ListSizes []int `json:"listSizes"`
	// PageSize is the limit of paginated LISTs.
	PageSize int `json:"pageSize"`
	// ListRepeats is how often each LIST is repeated.
	ListRepeats int `json:"listRepeats"`
	// Watchers is how many watches run at once while write-to-event latency is measured.
	Watchers int `json:"watchers"`
	// WatchEvents is how many writes that latency is measured over.
	WatchEvents int `json:"watchEvents"`
	// Applies is how many server-side applies of a status change are timed.
	Applies int `json:"applies"`
	// FillClients is the concurrency used to fill the LIST namespaces.
	FillClients int `json:"fillClients"`
	// Rounds is how many parts creates, watch writes and applies are split
	// into, run alternately on each path.
	Rounds int `json:"rounds"`
	// Identity is who the clients are: IdentityRBAC (a user RBAC grants the
	// machines to, as a controller or a person is) or IdentityMasters (a
	// member of system:masters, which every authorizer lets through at once).
	Identity string `json:"identity"`
	// ProfileSeconds is how long ichor-apiserver's CPU is profiled while one
	// client creates machines; 0 skips it.
	ProfileSeconds int `json:"profileSeconds"`
}

// The identities a run's clients can have.
const (
	IdentityRBAC    = "rbac"
	IdentityMasters = "masters"
)

// DefaultConfig is the full-size benchmark `make bench` runs.
func DefaultConfig() Config {
	return Config{
		Creates: 1000, CreateClients: []int{1, 32},
		ListSizes: []int{1000, 10000}, PageSize: 500, ListRepeats: 10,
		Watchers: 100, WatchEvents: 50, Applies: 300, FillClients: 32, Rounds: 5, Identity: IdentityRBAC,
		ProfileSeconds: 20,
	}
}

// SmokeConfig is small enough for `make test` and still exercises every measurement.
func SmokeConfig() Config {
	return Config{
		Creates: 20, CreateClients: []int{1, 4},
		ListSizes: []int{20, 40}, PageSize: 7, ListRepeats: 3,
		Watchers: 3, WatchEvents: 5, Applies: 10, FillClients: 4, Rounds: 2, Identity: IdentityRBAC,
		ProfileSeconds: 1,
	}
}

// AddFlags binds c's fields to flags, with c's values as defaults.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.Creates, "creates", c.Creates, "objects written by each create run")
	fs.Var((*intList)(&c.CreateClients), "create-clients", "comma-separated concurrencies of the create runs")
	fs.Var((*intList)(&c.ListSizes), "list-sizes", "comma-separated namespace sizes to LIST; the largest is also used for memory")
	fs.IntVar(&c.PageSize, "page-size", c.PageSize, "limit of paginated LISTs")
	fs.IntVar(&c.ListRepeats, "list-repeats", c.ListRepeats, "repetitions of each LIST")
	fs.IntVar(&c.Watchers, "watchers", c.Watchers, "concurrent watches during the watch-latency run")
	fs.IntVar(&c.WatchEvents, "watch-events", c.WatchEvents, "writes timed in the watch-latency run")
	fs.IntVar(&c.Applies, "applies", c.Applies, "server-side applies of a status change to time")
	fs.IntVar(&c.FillClients, "fill-clients", c.FillClients, "concurrency used to fill the LIST namespaces")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "parts the creates, watch writes and applies are split into, run alternately on each path")
	fs.IntVar(&c.ProfileSeconds, "profile-seconds", c.ProfileSeconds, "how long ichor-apiserver's CPU is profiled while one client creates machines (0 skips it)")
	fs.StringVar(&c.Identity, "identity", c.Identity, "who the clients are: rbac (a user RBAC grants the machines to) or masters (system:masters, which skips authorization)")
}

// Validate rejects sizes that cannot produce a measurement.
func (c *Config) Validate() error {
	for name, v := range map[string]int{"creates": c.Creates, "page-size": c.PageSize, "list-repeats": c.ListRepeats,
		"watchers": c.Watchers, "watch-events": c.WatchEvents, "applies": c.Applies, "fill-clients": c.FillClients, "rounds": c.Rounds} {
		if v <= 0 {
			return fmt.Errorf("-%s must be positive", name)
		}
	}
	if c.ProfileSeconds < 0 {
		return fmt.Errorf("-profile-seconds must not be negative")
	}
	if c.Identity != IdentityRBAC && c.Identity != IdentityMasters {
		return fmt.Errorf("-identity must be %s or %s, got %q", IdentityRBAC, IdentityMasters, c.Identity)
	}
	if len(c.CreateClients) == 0 || len(c.ListSizes) == 0 {
		return fmt.Errorf("-create-clients and -list-sizes must not be empty")
	}
	for _, v := range append(append([]int{}, c.CreateClients...), c.ListSizes...) {
		if v <= 0 {
			return fmt.Errorf("-create-clients and -list-sizes must be positive, got %d", v)
		}
	}
	if c.Rounds > min(c.Creates, c.WatchEvents, c.Applies) {
		return fmt.Errorf("-rounds (%d) must not exceed -creates (%d), -watch-events (%d) or -applies (%d): each round writes some of each", c.Rounds, c.Creates, c.WatchEvents, c.Applies)
	}
	if c.Applies > c.ListSizes[0] {
		return fmt.Errorf("-applies (%d) must not exceed the smallest list size (%d): it applies to those objects", c.Applies, c.ListSizes[0])
	}
	return nil
}

// intList is a comma-separated list of ints as a flag.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		out = append(out, n)
	}
	*l = out
	return nil
}
