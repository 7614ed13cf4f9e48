package web

import (
	"net/http"
	"slices"
)

// RabbitMQ's feature flags gate behaviour a cluster turns on once every
// node supports it, and tools and applications read them before they rely
// on that behaviour (streams, quorum queues, stream filtering...). Warren
// has the behaviour of every stable flag of the release it matches
// (broker.RabbitMQVersion) from the start, so it lists them all enabled;
// enabling one changes nothing.

// featureFlag is one of RabbitMQ's stable feature flags.
type featureFlag struct{ name, desc string }

var featureFlags = []featureFlag{
	{"classic_mirrored_queue_version", "Support setting version for classic mirrored queues"},
	{"classic_queue_type_delivery_support", "Bug fix for classic queue deliveries using mixed versions"},
	{"direct_exchange_routing_v2", "v2 direct exchange routing implementation"},
	{"drop_unroutable_metric", "Count unroutable publishes to be dropped in stats"},
	{"empty_basic_get_metric", "Count AMQP `basic.get` on empty queues in stats"},
	{"feature_flags_v2", "Feature flags subsystem V2"},
	{"implicit_default_bindings", "Default bindings are now implicit, instead of being stored in the database"},
	{"listener_records_in_ets", "Store listener records in ETS instead of Mnesia"},
	{"maintenance_mode_status", "Maintenance mode status"},
	{"message_containers", "Message containers."},
	{"quorum_queue", "Support queues of type `quorum`"},
	{"restart_streams", "Support for restarting streams with optional preferred next leader argument. Used to implement stream leader rebalancing"},
	{"stream_filtering", "Support for stream filtering."},
	{"stream_queue", "Support queues of type `stream`"},
	{"stream_sac_coordinator_unblock_group", "Bug fix to unblock a group of consumers in a super stream partition"},
	{"stream_single_active_consumer", "Single active consumer for streams"},
	{"stream_update_config_command", "A new internal command that is used to update streams as part of a policy."},
	{"tracking_records_in_ets", "Store tracking records in ETS instead of Mnesia"},
	{"user_limits", "Configure connection and channel limits for a user"},
	{"virtual_host_metadata", "Virtual host metadata (description, tags, etc)"},
}

// getFeatureFlags is GET /api/feature-flags.
func (s *Server) getFeatureFlags(w http.ResponseWriter, r *http.Request, p *principal) {
	out := make([]item, 0, len(featureFlags))
	for _, f := range featureFlags {
		out = append(out, item{"name": f.name, "desc": f.desc, "doc_url": "", "stability": "stable",
			"provided_by": "rabbit", "state": "enabled"})
	}
	writeJSON(w, http.StatusOK, out)
}

// putFeatureFlagEnable is PUT /api/feature-flags/{name}/enable: every flag
// is enabled already; an unknown one is an error, as in RabbitMQ.
func (s *Server) putFeatureFlagEnable(w http.ResponseWriter, r *http.Request, p *principal) {
	name := r.PathValue("name")
	if !slices.ContainsFunc(featureFlags, func(f featureFlag) bool { return f.name == name }) {
		writeError(w, http.StatusBadRequest, "bad_request", "unsupported feature flag '"+name+"'")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
