package main

import (
	"fmt"
	"net/url"
	"slices"

	"github.com/urfave/cli/v2"
)

// The membership verbs of replicated queues: rabbitmq-queues add_member,
// delete_member, grow, shrink, rebalance and rabbitmq-streams add_replica,
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

// rebalanceCommand is rebalance: it waits until every data group holding
// queues is led by its preferred member (if up), and prints the leaders,
// per node and per group.
func rebalanceCommand() *cli.Command {
	return &cli.Command{
		Name:  "rebalance",
		Usage: "wait until each data group is led by its preferred member (leaderships go back on their own), and print the leaders",
		Flags: ctlFlags(),
		Action: func(cc *cli.Context) error {
			if cc.NArg() > 0 {
				// rabbitmq-queues rebalance takes a queue type: only
				// quorum queues (and streams) have leaders here.
				if t := cc.Args().First(); cc.NArg() > 1 || t != "quorum" && t != "all" && t != "stream" {
					return fmt.Errorf("want no argument, or one of quorum, stream, all")
				}
			}
			var out []struct {
				Group     uint64 `json:"group"`
				Preferred string `json:"preferred"`
				Leader    string `json:"leader"`
				Queues    int    `json:"queues"`
			}
			if err := ctlDo(cc, "POST", "/api/quorum-groups/rebalance", nil, &out); err != nil {
				return err
			}
			type led struct{ groups, queues int }
			per := map[string]*led{}
			var nodes []string
			for _, g := range out {
				name := g.Leader
				if name == "" {
					name = "(no leader known)"
				}
				if per[name] == nil {
					per[name] = &led{}
					nodes = append(nodes, name)
				}
				per[name].groups++
				per[name].queues += g.Queues
			}
			slices.Sort(nodes)
			fmt.Fprintf(cc.App.Writer, "%-24s %12s %12s\n", "node", "groups led", "queues led")
			for _, n := range nodes {
				fmt.Fprintf(cc.App.Writer, "%-24s %12d %12d\n", n, per[n].groups, per[n].queues)
			}
			for _, g := range out {
				fmt.Fprintf(cc.App.Writer, "data group %d: leader %q (preferred %q), %d queues\n", g.Group, g.Leader, g.Preferred, g.Queues)
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
		rebalanceCommand(),
	}
}
