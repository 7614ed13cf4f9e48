package broker

// QuorumGroupsInUse returns the data groups that hold at least one
// replicated quorum queue of this node's definitions: the groups a member
// must run (cmd/warren leaves the others dormant).
func (b *Broker) QuorumGroupsInUse() map[uint64]bool {
	use := map[uint64]bool{}
	for _, v := range b.allVHosts() {
		v.mu.RLock()
		for _, qe := range v.queues {
			if qe.repl != nil {
				use[qe.repl.group] = true
			}
		}
		v.mu.RUnlock()
	}
	return use
}
