package broker

import (
	"sort"

	"github.com/warrenmq/warren/store"
)

// Global runtime parameters (RabbitMQ's global parameters: cluster_name,
// internal_cluster_id, ...): named JSON values the management API and
// definitions carry. The broker keeps them and stores them; it gives them
// no meaning. Guarded by Broker.mu; changes are definition commands (defapply_admin.go).

// GlobalParameter is a global parameter and its JSON value.
type GlobalParameter struct {
	Name  string
	Value []byte
}

type globalParam struct {
	value   []byte
	storeID uint64
}

// GlobalParameters lists the global parameters by name.
func (b *Broker) GlobalParameters() []GlobalParameter {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]GlobalParameter, 0, len(b.globals))
	for name, g := range b.globals {
		out = append(out, GlobalParameter{Name: name, Value: g.value})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// GlobalParameterValue returns the JSON value of global parameter name.
func (b *Broker) GlobalParameterValue(name string) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, ok := b.globals[name]
	if !ok {
		return nil, false
	}
	return g.value, true
}

// SetGlobalParameter sets global parameter name to the JSON value (which
// the caller has validated) and stores it; created reports whether it is
// new.
func (b *Broker) SetGlobalParameter(name string, value []byte) (created bool, err error) {
	r := b.propose(&defCmd{Op: opSetGlobal, Name: name, Value: value})
	return r.created, r.err
}

// DeleteGlobalParameter removes global parameter name; it reports whether
// there was one.
func (b *Broker) DeleteGlobalParameter(name string) (bool, error) {
	r := b.propose(&defCmd{Op: opDeleteGlobal, Name: name})
	return r.existed, r.err
}

// recoverGlobalsLocked loads the stored global parameters. Hold b.mu.
func (b *Broker) recoverGlobalsLocked(gs []store.GlobalParameter) {
	b.globals = make(map[string]*globalParam, len(gs))
	for _, g := range gs {
		b.globals[g.Name] = &globalParam{value: g.Value, storeID: g.ID}
	}
}
