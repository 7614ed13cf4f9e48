package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/store"
)

// Policies set queue and exchange arguments by name pattern, as
// RabbitMQ's policies do: of the policies of a vhost whose pattern matches
// an entity's name and that apply to its kind, the one of the highest
// priority applies. For a queue, an argument given at declare wins over
// the policy, except that numeric limits take the lower of the two;
// an operator policy (of those matching, the highest priority) then caps
// the numeric limits: the lower value wins. Changes apply to existing
// queues and exchanges at once.

// ErrInvalidPolicy means SetPolicy was given a bad pattern, apply-to or
// definition.
var ErrInvalidPolicy = errors.New("broker: invalid policy")

// policy is one policy or operator policy of a vhost.
type policy struct {
	name, pattern, applyTo string
	re                     *regexp.Regexp
	priority               int
	def                    map[string]any
	operator               bool
	storeID                uint64
}

// policySet is a vhost's policies. Guarded by vhost.mu.
type policySet struct {
	user, operator map[string]*policy
}

// policyKeys are the definition keys policies may set and how each is
// checked; operatorKeys are those operator policies may set.
var (
	policyKeys = map[string]string{
		"message-ttl": "ttl", "expires": "pos", "max-length": "nonneg", "max-length-bytes": "nonneg",
		"delivery-limit": "nonneg", "consumer-timeout": "nonneg", "overflow": "overflow",
		"dead-letter-exchange": "string", "dead-letter-routing-key": "string", "alternate-exchange": "string",
		"max-age": "maxage", "stream-max-segment-size-bytes": "nonneg",
		"queue-leader-locator": "string", "dead-letter-strategy": "dlstrategy",
		// Keys RabbitMQ 3.x knows that change nothing here, accepted so
		// that its policies and definitions exports apply: a classic
		// queue's mode, version and master locator (Warren pages any
		// queue and places it by queue-leader-locator), quorum queues'
		// in-memory limits, and classic queue mirroring (Warren mirrors no
		// classic queue: quorum queues replicate; SetPolicy logs a warning).
		"queue-mode": "enum:default,lazy", "queue-version": "enum:1,2",
		"queue-master-locator": "enum:client-local,min-masters,random",
		"max-in-memory-length": "nonneg", "max-in-memory-bytes": "nonneg",
		"ha-mode": "enum:all,exactly,nodes", "ha-params": "any", "ha-sync-mode": "enum:manual,automatic",
		"ha-sync-batch-size": "pos", "ha-promote-on-shutdown": "enum:always,when-synced",
		"ha-promote-on-failure": "enum:always,when-synced",
	}
	operatorKeys = map[string]bool{
		"message-ttl": true, "expires": true, "max-length": true, "max-length-bytes": true, "delivery-limit": true,
	}
	// numericKeys take the lower of argument and policy.
	numericKeys = []string{"message-ttl", "expires", "max-length", "max-length-bytes", "delivery-limit", "consumer-timeout"}
)

// policyInt reads a numeric policy value: JSON numbers arrive as float64.
func policyInt(v any) (int64, bool) {
	if n, ok := argInt(v); ok {
		return n, true
	}
	if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1<<62 {
		return int64(f), true
	}
	return 0, false
}

// validatePolicy checks a definition as rabbit_policy's validators do.
func validatePolicy(def map[string]any, operator bool) error {
	if len(def) == 0 {
		return fmt.Errorf("%w: empty definition", ErrInvalidPolicy)
	}
	var unknown []string
	for k, v := range def {
		kind, ok := policyKeys[k]
		if !ok || (operator && !operatorKeys[k]) {
			unknown = append(unknown, k)
			continue
		}
		if values, ok := strings.CutPrefix(kind, "enum:"); ok {
			if !slices.Contains(strings.Split(values, ","), fmt.Sprint(v)) {
				return fmt.Errorf("%w: %s: %v is not one of %s", ErrInvalidPolicy, k, v, strings.ReplaceAll(values, ",", ", "))
			}
			continue
		}
		switch kind {
		case "any":
		case "string":
			if _, ok := v.(string); !ok {
				return fmt.Errorf("%w: %s must be a string", ErrInvalidPolicy, k)
			}
		case "maxage":
			if s, ok := v.(string); !ok {
				return fmt.Errorf("%w: %s must be a string", ErrInvalidPolicy, k)
			} else if _, ok := parseMaxAge(s); !ok {
				return fmt.Errorf("%w: %s: %q is not a valid age", ErrInvalidPolicy, k, s)
			}
		case "overflow":
			if _, why := parseOverflow(v); why != "" {
				return fmt.Errorf("%w: %s: %v is not a valid overflow", ErrInvalidPolicy, k, v)
			}
		case "dlstrategy":
			if _, why := parseDLStrategy(v); why != "" {
				return fmt.Errorf("%w: %s: %v is not a valid dead-letter strategy", ErrInvalidPolicy, k, v)
			}
		default:
			n, ok := policyInt(v)
			switch {
			case !ok:
				return fmt.Errorf("%w: %s must be an integer", ErrInvalidPolicy, k)
			case n < 0 || (kind == "pos" && n == 0):
				return fmt.Errorf("%w: %s must be %s", ErrInvalidPolicy, k, map[bool]string{true: "positive", false: "non-negative"}[kind == "pos"])
			case (kind == "ttl" || kind == "pos") && n > maxExpiry:
				return fmt.Errorf("%w: %s is too large", ErrInvalidPolicy, k)
			}
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("%w: %s are not recognised policy settings", ErrInvalidPolicy, strings.Join(unknown, ", "))
	}
	return nil
}

// SetPolicy creates or replaces the policy (operator policy when
// operator) name of vhost: it applies to the queues, exchanges or both
// (applyTo "queues", "exchanges", "all"; "classic_queues" counts as
// "queues") whose names match the regular expression pattern. Existing
// queues and exchanges take it at once; it is stored for restarts.
func (b *Broker) SetPolicy(vhostName, name, pattern, applyTo string, priority int, definition map[string]any, operator bool) error {
	v := b.vhost(vhostName)
	if v == nil {
		return fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	if name == "" {
		return fmt.Errorf("%w: empty name", ErrInvalidPolicy)
	}
	switch applyTo {
	case "":
		applyTo = "all"
	case "classic_queues":
		applyTo = "queues"
	case "queues", "exchanges", "all":
	default:
		return fmt.Errorf("%w: apply-to %q", ErrInvalidPolicy, applyTo)
	}
	if operator && applyTo == "exchanges" {
		return fmt.Errorf("%w: operator policies apply to queues", ErrInvalidPolicy)
	}
	if _, err := regexp.Compile(pattern); err != nil {
		return fmt.Errorf("%w: pattern: %v", ErrInvalidPolicy, err)
	}
	if err := validatePolicy(definition, operator); err != nil {
		return err
	}
	if _, ok := definition["ha-mode"]; ok {
		b.log.Warn("policy sets ha-mode: Warren does not mirror classic queues, the ha-* keys are accepted and have no effect; declare quorum queues (x-queue-type quorum) to replicate",
			zap.String("vhost", vhostName), zap.String("policy", name))
	}
	def, err := json.Marshal(definition)
	if err != nil {
		return fmt.Errorf("%w: definition: %v", ErrInvalidPolicy, err)
	}
	return b.propose(&defCmd{Op: opSetPolicy, VHost: vhostName, Name: name, Pattern: pattern, ApplyTo: applyTo,
		Priority: priority, Definition: def, Operator: operator}).err
}

// ClearPolicy deletes a policy (operator policy when operator); what it
// set reverts at once.
func (b *Broker) ClearPolicy(vhostName, name string, operator bool) error {
	if b.vhost(vhostName) == nil {
		return fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	return b.propose(&defCmd{Op: opClearPolicy, VHost: vhostName, Name: name, Operator: operator}).err
}

// PolicyInfo describes a policy.
type PolicyInfo struct {
	VHost, Name, Pattern, ApplyTo string
	Priority                      int
	Definition                    map[string]any
	Operator                      bool
}

// Policies lists the policies and operator policies of a vhost, by name.
func (b *Broker) Policies(vhostName string) ([]PolicyInfo, error) {
	v := b.vhost(vhostName)
	if v == nil {
		return nil, fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	v.mu.RLock()
	var out []PolicyInfo
	for _, set := range []map[string]*policy{v.policies.user, v.policies.operator} {
		for _, p := range set {
			def := make(map[string]any, len(p.def))
			for k, val := range p.def {
				def[k] = val
			}
			out = append(out, PolicyInfo{VHost: v.name, Name: p.name, Pattern: p.pattern, ApplyTo: p.applyTo,
				Priority: p.priority, Definition: def, Operator: p.operator})
		}
	}
	v.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Operator != out[j].Operator {
			return !out[i].Operator
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// get returns the policy (operator policy when operator) name, or nil. It
// only reads (v.mu read suffices).
func (s *policySet) get(name string, operator bool) *policy {
	if operator {
		return s.operator[name]
	}
	return s.user[name]
}

func (s *policySet) of(operator bool) map[string]*policy {
	if s.user == nil {
		s.user = make(map[string]*policy)
		s.operator = make(map[string]*policy)
	}
	if operator {
		return s.operator
	}
	return s.user
}

// matchPolicy is the policy of set for an entity: the highest priority
// whose pattern matches name and that applies to the kind (ties: the
// first name). Hold v.mu (read).
func matchPolicy(set map[string]*policy, name string, queue bool) *policy {
	var best *policy
	for _, p := range set {
		if p.applyTo != "all" && (p.applyTo == "queues") != queue {
			continue
		}
		if !p.re.MatchString(name) {
			continue
		}
		if best == nil || p.priority > best.priority || (p.priority == best.priority && p.name < best.name) {
			best = p
		}
	}
	return best
}

// withPolicies returns settings s (from the declare arguments args of
// queue name) with the vhost's policies applied. Hold v.mu (read or
// write).
func (v *vhost) withPolicies(name string, args amqp.Table, s queueSettings) queueSettings {
	pol := matchPolicy(v.policies.user, name, true)
	op := matchPolicy(v.policies.operator, name, true)
	if pol == nil && op == nil {
		return s
	}
	get := func(key string) (int64, bool) {
		switch key {
		case "message-ttl":
			return s.cfg.MessageTTL, s.cfg.MessageTTL >= 0
		case "expires":
			return s.cfg.Expires, s.cfg.Expires > 0
		case "max-length":
			return s.cfg.MaxLength, s.cfg.MaxLength >= 0
		case "max-length-bytes":
			return s.cfg.MaxLengthBytes, s.cfg.MaxLengthBytes >= 0
		case "delivery-limit":
			return s.cfg.DeliveryLimit, s.cfg.DeliveryLimit >= 0
		default: // consumer-timeout
			return s.consumerTimeout, s.consumerTimeout > 0
		}
	}
	put := func(key string, n int64) {
		switch key {
		case "message-ttl":
			s.cfg.MessageTTL = n
		case "expires":
			s.cfg.Expires = n
		case "max-length":
			s.cfg.MaxLength = n
		case "max-length-bytes":
			s.cfg.MaxLengthBytes = n
		case "delivery-limit":
			s.cfg.DeliveryLimit = n
		default:
			s.consumerTimeout = n
		}
	}
	for _, p := range []*policy{pol, op} {
		if p == nil {
			continue
		}
		for _, key := range numericKeys {
			pv, ok := policyInt(p.def[key])
			if !ok {
				continue
			}
			if cur, set := get(key); !set || pv < cur {
				put(key, pv)
			}
		}
	}
	if pol != nil {
		if _, ok := args["x-overflow"]; !ok {
			if o, why := parseOverflow(pol.def["overflow"]); why == "" {
				s.cfg.Overflow = o
			}
		}
		if x, ok := pol.def["dead-letter-exchange"].(string); ok && !s.hasDLX {
			s.dlx, s.hasDLX = x, true
		}
		if v, ok := pol.def["dead-letter-strategy"]; ok && !s.hasDLStrategy {
			if alo, why := parseDLStrategy(v); why == "" {
				s.cfg.DeadLetterAtLeastOnce = alo
			}
		}
		if k, ok := pol.def["dead-letter-routing-key"].(string); ok && !s.hasDLRK {
			s.dlrk, s.hasDLRK = k, true
		}
	}
	s.cfg.DeadLetter = s.hasDLX
	if s.stream != nil {
		s = streamPolicies([]*policy{pol, op}, s)
	}
	return s
}

// alternateFor is the alternate exchange of exchange name declared with
// args: the argument, else the matching policy's. Hold v.mu.
func (v *vhost) alternateFor(name string, args amqp.Table) string {
	if ae := alternateOf(args); ae != "" {
		return ae
	}
	if p := matchPolicy(v.policies.user, name, false); p != nil {
		ae, _ := p.def["alternate-exchange"].(string)
		return ae
	}
	return ""
}

// applyPolicies brings every queue and exchange of v in line with its
// policies. Hold b.defMu (so no queue is declared meanwhile), not v.mu.
func (v *vhost) applyPolicies() {
	v.mu.Lock()
	for _, ex := range v.exchanges {
		if ex.name != "" {
			ex.alternate = v.alternateFor(ex.name, ex.args)
		}
	}
	type change struct {
		qe  *queueEntity
		set queueSettings
		pol string
	}
	var changes []change
	for _, qe := range v.queues {
		s, err := parseQueueArgs(qe.name, v.name, qe.args)
		if err != nil {
			continue
		}
		pol := ""
		if p := matchPolicy(v.policies.user, qe.name, true); p != nil {
			pol = p.name
		}
		changes = append(changes, change{qe, v.withPolicies(qe.name, qe.args, s), pol})
	}
	v.mu.Unlock()
	now := nowMs()
	for _, c := range changes {
		qe := c.qe
		qe.mu.Lock()
		if qe.deleted {
			qe.mu.Unlock()
			continue
		}
		if qe.stream != nil {
			qe.stream.setConfigLocked(streamConfig(c.set))
			qe.fx.policy = c.pol
			qe.mu.Unlock()
			qe.stream.signal()
			continue
		}
		qe.fx.set = c.set
		qe.fx.policy = c.pol
		if qe.repl != nil {
			// Its state is its group's: the leader proposes the change.
			qe.mu.Unlock()
			v.b.setConfigRepl(qe, c.set.cfg, now)
			continue
		}
		qe.at = qe.at || c.set.needsAt()
		qe.setConfigLocked(c.set.cfg, now)
		qe.armExpiryLocked()
		qe.touchLocked()
		qe.armUnusedLocked()
		qe.dispatchLocked()
		qe.mu.Unlock()
		qe.flushDead()
	}
}

// recoverPolicies loads stored policies into their vhosts, before the
// exchanges and queues they apply to. Hold b.mu.
func (b *Broker) recoverPolicies(recs []store.Policy) {
	for _, r := range recs {
		v := b.vhosts[r.VHost]
		if v == nil {
			continue
		}
		var def map[string]any
		re, err := regexp.Compile(r.Pattern)
		if err == nil {
			def, err = decodePolicyDefinition(r.Definition)
		}
		if err != nil {
			b.log.Warn("skipped invalid stored policy", zap.String("policy", r.Name), zap.Error(err))
			continue
		}
		v.policies.of(r.Operator)[r.Name] = &policy{name: r.Name, pattern: r.Pattern, applyTo: r.ApplyTo, re: re,
			priority: r.Priority, def: def, operator: r.Operator, storeID: r.ID}
	}
}

// PolicyMatch names the policy and the operator policy ("" = none) that
// apply to the queue (queue true) or exchange name of a vhost, and gives
// their effective definition, as the management API's
// effective_policy_definition: the policy's keys, and the operator
// policy's where the policy lacks them or, for numeric limits, where the
// operator's value is lower.
func (b *Broker) PolicyMatch(vhostName, name string, queue bool) (pol, opPol string, effective map[string]any) {
	effective = map[string]any{}
	v := b.vhost(vhostName)
	if v == nil {
		return "", "", effective
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	p := matchPolicy(v.policies.user, name, queue)
	var op *policy
	if queue {
		op = matchPolicy(v.policies.operator, name, true)
	}
	if p != nil {
		pol = p.name
		for k, val := range p.def {
			effective[k] = val
		}
	}
	if op != nil {
		opPol = op.name
		for k, val := range op.def {
			cur, ok := effective[k]
			if !ok {
				effective[k] = val
				continue
			}
			a, aok := policyInt(cur)
			o, ook := policyInt(val)
			if aok && ook && o < a {
				effective[k] = val
			}
		}
	}
	return pol, opPol, effective
}
