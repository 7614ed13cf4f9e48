package main

import (
	"strings"
	"testing"
)

// TestCtlMembersArguments: the membership verbs refuse what they cannot
// do with a clear error (the cluster side is cluster/quorum_members_test.go).
func TestCtlMembersArguments(t *testing.T) {
	e := newCtlEnv(t)
	e.must("declare_queue", "plain")
	e.must("declare_queue", "--type", "quorum", "qq")
	e.must("declare_queue", "--type", "stream", "st")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"add_member", "nosuch", "n2"}, "queue 'nosuch' in vhost '/' not found"},
		{[]string{"delete_member", "nosuch", "n2"}, "queue 'nosuch' in vhost '/' not found"},
		{[]string{"add_member", "plain", "n2"}, "queue 'plain' in vhost '/' is not a quorum queue"},
		{[]string{"delete_member", "plain", "n2"}, "queue 'plain' in vhost '/' is not a quorum queue"},
		{[]string{"add_member", "st", "n2"}, "queue 'st' in vhost '/' is not a quorum queue"},
		{[]string{"add_replica", "plain", "n2"}, "queue 'plain' in vhost '/' is not a stream"},
		{[]string{"delete_replica", "qq", "n2"}, "queue 'qq' in vhost '/' is not a stream"},
		{[]string{"add_member", "qq", "n2"}, "queue 'qq' in vhost '/' is not replicated: this node has no data groups"},
		{[]string{"add_replica", "st", "n2"}, "queue 'st' in vhost '/' is not replicated"},
		{[]string{"add_member", "qq"}, "want two arguments: QUEUE NODE"},
		{[]string{"delete_replica", "st", "n2", "n3"}, "want two arguments: QUEUE NODE"},
		{[]string{"grow"}, "want one argument: NODE"},
		{[]string{"grow", "n2"}, "this node has no data groups"},
		{[]string{"shrink", "n2"}, "this node has no data groups"},
		{[]string{"rebalance"}, "this node has no data groups"},
		{[]string{"rebalance", "classic"}, "want no argument, or one of quorum, stream, all"},
	}
	for _, c := range cases {
		got := e.mustFail(c.args[0], c.args[1:]...)
		if !strings.Contains(got, c.want) {
			t.Errorf("ctl %v: %q, want %q", c.args, got, c.want)
		}
	}
}
