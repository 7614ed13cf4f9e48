package cluster

// Members is the group's configuration as this node knows it: every
// member's name and cluster address (nil before the group has started or
// once it is closed).
func (l *RaftLog) Members() map[string]string {
	r := l.running()
	if r == nil {
		return nil
	}
	cf := r.GetConfiguration()
	if cf.Error() != nil {
		return nil
	}
	servers := cf.Configuration().Servers
	out := make(map[string]string, len(servers))
	for _, s := range servers {
		out[string(s.ID)] = string(s.Address)
	}
	return out
}
