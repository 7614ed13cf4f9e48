package main

import (
	"fmt"
	"net/url"

	"github.com/urfave/cli/v2"
)

// The membership verbs of replicated queues: rabbitmq-queues add_member,
// delete_member, grow, shrink and rabbitmq-streams add_replica,
// delete_replica. A queue's replicas are those of the data group it is in,
// shared with other queues: the command prints the group and its members
// afterwards (docs/clustering.md).

// memberCommand is add_member / delete_member (replicas: add_replica /
// delete_replica): QUEUE NODE.
func memberCommand(name, usage string, add, replicas bool) *cli.Command {
	return &cli.Command{
		Name: name, Usage: usage, ArgsUsage: "QUEUE NODE", Flags: ctlFlags(vhostFlag),
		Action: func(cc *cli.Context) error {
			q, node, err := twoArgs(cc)
			if err != nil {
				return err
			}
			kind := "members"
			if replicas {
				kind = "replicas"
			}
			path := queuePath(cc, q) + "/" + kind
			method := "POST"
			var body any = map[string]string{"node": node}
			if !add {
				method, path, body = "DELETE", path+"/"+url.PathEscape(node), nil
			}
			var out struct {
				Group   uint64   `json:"group"`
				Members []string `json:"members"`
			}
			if err := ctlDo(cc, method, path, body, &out); err != nil {
				return err
			}
			fmt.Fprintf(cc.App.Writer, "data group %d (every queue in it): members %v\n", out.Group, out.Members)
			return nil
		},
	}
}

// groupsCommand is grow / shrink NODE: node joins or leaves every data
// group.
func groupsCommand(name, usage string) *cli.Command {
	return &cli.Command{
		Name: name, Usage: usage, ArgsUsage: "NODE", Flags: ctlFlags(),
		Action: func(cc *cli.Context) error {
			node, err := oneArg(cc)
			if err != nil {
				return err
			}
			var out []struct {
				Group   uint64   `json:"group"`
				Members []string `json:"members"`
			}
			if err := ctlDo(cc, "POST", "/api/quorum-groups/"+name, map[string]string{"node": node}, &out); err != nil {
				return err
			}
			for _, g := range out {
				fmt.Fprintf(cc.App.Writer, "data group %d: members %v\n", g.Group, g.Members)
			}
			return nil
		},
	}
}

func memberCommands() []*cli.Command {
	return []*cli.Command{
		memberCommand("add_member", "add a replica of a quorum queue on NODE (to its data group, shared with other queues)", true, false),
		memberCommand("delete_member", "remove the replica of a quorum queue on NODE (from its data group, shared with other queues)", false, false),
		memberCommand("add_replica", "add a replica of a stream on NODE (to its data group, shared with other queues)", true, true),
		memberCommand("delete_replica", "remove the replica of a stream on NODE (from its data group, shared with other queues)", false, true),
		groupsCommand("grow", "add NODE to every data group (a replica of every replicated queue)"),
		groupsCommand("shrink", "remove NODE from every data group it is not the last member of"),
	}
}
