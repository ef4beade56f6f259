package lease

import "sort"

// Transitions is a state machine as data: for each state, the states it may
// move to. Every status write consults it, so the table in the contract and
// the behaviour of the code cannot drift apart.
type Transitions struct {
	Machine  string
	Terminal []string
	Allowed  map[string][]string
}

// Check returns nil when from -> to is allowed, else a *TransitionError.
func (t Transitions) Check(from, to string) error {
	for _, s := range t.Allowed[from] {
		if s == to {
			return nil
		}
	}
	return &TransitionError{Machine: t.Machine, From: from, To: to}
}

// IsTerminal reports whether s is one of the machine's terminal states.
func (t Transitions) IsTerminal(s string) bool {
	for _, x := range t.Terminal {
		if x == s {
			return true
		}
	}
	return false
}

// States lists every state named in the table, sorted.
func (t Transitions) States() []string {
	seen := map[string]bool{}
	for from, tos := range t.Allowed {
		seen[from] = true
		for _, to := range tos {
			seen[to] = true
		}
	}
	for _, s := range t.Terminal {
		seen[s] = true
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Sources lists the states that may move to to, sorted; claim and reclaim
// SQL use it to build their status IN (...) predicates from the table.
func (t Transitions) Sources(to string) []string {
	var out []string
	for from, tos := range t.Allowed {
		for _, x := range tos {
			if x == to {
				out = append(out, from)
			}
		}
	}
	sort.Strings(out)
	return out
}
