package ownership

import "github.com/aluad/aluad/pkg/alua"

// The explicit-ALUA host model: the baseline implicit ALUA is measured
// against (reference 002 "ownership thrash"). Each host picks owners by
// itself, seeing only its own paths: a host that does not reach a LUN's
// owner sends SET TARGET PORT GROUPS for a node it does reach, and a host
// with a preferred node (a failback policy) asks for that node whenever
// it reaches it and the LUN is elsewhere. Under a partial fault two such
// hosts undo each other's moves for ever; the implicit core, which sees
// every host, never does.

// ExplicitSTPGs returns the ownership changes that explicit hosts would
// make in one round, given the core's view of connectivity and LUN users.
// prefer maps a host to the node its path policy prefers ("" or absent:
// none). Hosts act in name order, each seeing the changes of those before
// it, as STPGs arriving one after another would.
func (c *Core) ExplicitSTPGs(prefer map[string]string) []OwnerChanged {
	var out []OwnerChanged
	for _, id := range c.lunIDs {
		l := c.luns[id]
		owner := l.owner
		for _, name := range c.hostNames {
			if !l.users[name] {
				continue
			}
			r := c.reachable(c.hosts[name])
			if len(r) == 0 {
				continue
			}
			want := ""
			switch p := prefer[name]; {
			case p != "" && contains(r, p) && owner != p:
				want = p
			case !contains(r, owner):
				want = r[0]
			}
			if want != "" {
				owner = want
				out = append(out, OwnerChanged{LUN: id, Owner: want, Cause: alua.CauseSTPG})
			}
		}
	}
	return out
}
