package main

import (
	"fmt"
	"net/url"

	"github.com/urfave/cli/v2"
)

// Cluster membership commands, as rabbitmqctl names them; each goes to the
// node --url names.
func clusterCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name: "cluster_status", Usage: "list the cluster's nodes: running, metadata leader, partitions", Flags: ctlFlags(),
			Action: func(cc *cli.Context) error {
				var st struct {
					ClusterName string           `json:"cluster_name"`
					Nodes       []map[string]any `json:"nodes"`
				}
				if err := ctlDo(cc, "GET", "/api/cluster/status", nil, &st); err != nil {
					return err
				}
				if format, err := ctlFormatter(cc); err != nil {
					return err
				} else if format == "json" {
					return printJSON(cc, st)
				}
				fmt.Fprintf(cc.App.Writer, "cluster %s\n", st.ClusterName)
				return printList(cc, st.Nodes, []string{"name", "cluster_addr", "running", "metadata_leader", "partitions"})
			},
		},
		{
			Name: "join_cluster", Usage: "make the node join the cluster of the node at ADDR (its cluster address): a node that left it, or one started with --join", ArgsUsage: "ADDR", Flags: ctlFlags(),
			Action: func(cc *cli.Context) error {
				addr, err := oneArg(cc)
				if err != nil {
					return err
				}
				return ctlDo(cc, "POST", "/api/cluster/join", map[string]any{"node": addr}, nil)
			},
		},
		{
			Name: "leave", Usage: "take the node out of its cluster", Flags: ctlFlags(),
			Action: func(cc *cli.Context) error {
				return ctlDo(cc, "POST", "/api/cluster/leave", nil, nil)
			},
		},
		{
			Name: "forget_cluster_node", Usage: "remove the node NAME from the cluster", ArgsUsage: "NAME", Flags: ctlFlags(),
			Action: func(cc *cli.Context) error {
				name, err := oneArg(cc)
				if err != nil {
					return err
				}
				return ctlDo(cc, "DELETE", "/api/cluster/nodes/"+url.PathEscape(name), nil, nil)
			},
		},
	}
}
