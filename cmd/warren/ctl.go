package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

// warren ctl: administration over the management HTTP API, in the manner
// of rabbitmqctl and rabbitmqadmin. Lists print as tables (or JSON with
// --formatter json, or --json); the list commands take the columns to
// show as arguments, as rabbitmqctl does (list_queues name messages).

func ctlFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "url", Value: "http://localhost:15672", EnvVars: []string{"WARREN_CTL_URL"}, Usage: "management API base URL"},
		&cli.StringFlag{Name: "user", Value: "guest", EnvVars: []string{"WARREN_CTL_USER"}, Usage: "user name"},
		&cli.StringFlag{Name: "password", Value: "guest", EnvVars: []string{"WARREN_CTL_PASSWORD"}, Usage: "password"},
		&cli.StringFlag{Name: "cacert", EnvVars: []string{"WARREN_CTL_CACERT"}, Usage: "PEM file of the CA certificates to trust for an https:// URL (default: the system's)"},
		&cli.StringFlag{Name: "formatter", Value: "table", Usage: "output format: table or json"},
		&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table (--formatter json)"},
	}, extra...)
}

var vhostFlag = &cli.StringFlag{Name: "vhost", Aliases: []string{"p"}, Value: "/", Usage: "virtual host"}

func ctlCommand() *cli.Command {
	list := func(name, usage, path string, perVHost bool, cols ...string) *cli.Command {
		return listCommand(name, usage, path, perVHost, nil, cols...)
	}
	return &cli.Command{
		Name:      "ctl",
		Usage:     "administer a running broker over its HTTP API",
		ArgsUsage: "COMMAND [ARGS...]",
		Action:    ctlUnknown,
		Subcommands: append([]*cli.Command{
			list("list_queues", "list queues", "/api/queues", true, "vhost", "name", "messages", "messages_ready", "messages_unacknowledged", "consumers", "durable"),
			list("list_exchanges", "list exchanges", "/api/exchanges", true, "vhost", "name", "type", "durable", "auto_delete"),
			list("list_bindings", "list bindings", "/api/bindings", true, "vhost", "source", "destination", "destination_type", "routing_key"),
			list("list_connections", "list connections", "/api/connections", false, "name", "user", "vhost", "channels", "state"),
			listCommand("list_channels", "list channels", "/api/channels", false, channelColumns,
				"name", "connection", "user", "vhost", "number", "consumer_count", "messages_unacknowledged", "prefetch_count", "confirm"),
			listCommand("list_consumers", "list consumers", "/api/consumers", true, consumerColumns,
				"vhost", "queue_name", "channel", "consumer_tag", "ack_required", "prefetch_count", "exclusive", "arguments"),
			list("list_users", "list users", "/api/users", false, "name", "tags"),
			list("list_vhosts", "list virtual hosts", "/api/vhosts", false, "name", "messages"),
			list("list_permissions", "list permissions", "/api/permissions", false, "user", "vhost", "configure", "write", "read"),
			list("list_policies", "list policies", "/api/policies", true, "vhost", "name", "pattern", "apply-to", "definition", "priority"),
			list("list_operator_policies", "list operator policies", "/api/operator-policies", true, "vhost", "name", "pattern", "apply-to", "definition", "priority"),
			setPolicyCommand("set_policy", "/api/policies/"),
			setPolicyCommand("set_operator_policy", "/api/operator-policies/"),
			clearPolicyCommand("clear_policy", "/api/policies/"),
			clearPolicyCommand("clear_operator_policy", "/api/operator-policies/"),
			addSuperStreamCommand(),
			streamStatusCommand(),
			deleteSuperStreamCommand(),
			{
				Name: "add_user", Usage: "add or update a user", ArgsUsage: "NAME PASSWORD",
				Flags: ctlFlags(&cli.StringFlag{Name: "tags", Usage: "comma-separated tags, e.g. administrator"}),
				Action: func(cc *cli.Context) error {
					name, pass, err := twoArgs(cc)
					if err != nil {
						return err
					}
					return ctlDo(cc, "PUT", "/api/users/"+url.PathEscape(name), map[string]any{"password": pass, "tags": cc.String("tags")}, nil)
				},
			},
			setUserTagsCommand(),
			setUserLimitsCommand(),
			clearUserLimitsCommand(),
			listUserLimitsCommand(),
			setVHostLimitsCommand(),
			clearVHostLimitsCommand(),
			listVHostLimitsCommand(),
			changePasswordCommand(),
			closeConnectionCommand(),
			declareExchangeCommand(),
			deleteExchangeCommand(),
			declareBindingCommand(),
			deleteBindingCommand(),
			publishCommand(),
			getCommand(),
			{
				Name: "delete_user", Usage: "delete a user", ArgsUsage: "NAME", Flags: ctlFlags(),
				Action: func(cc *cli.Context) error { return ctlDelete(cc, "/api/users/") },
			},
			{
				Name: "set_permissions", Usage: "set a user's permissions on a vhost", ArgsUsage: "USER CONFIGURE WRITE READ",
				Flags: ctlFlags(vhostFlag),
				Action: func(cc *cli.Context) error {
					if cc.NArg() != 4 {
						return errors.New("want USER CONFIGURE WRITE READ")
					}
					a := cc.Args()
					return ctlDo(cc, "PUT", "/api/permissions/"+url.PathEscape(cc.String("vhost"))+"/"+url.PathEscape(a.Get(0)),
						map[string]string{"configure": a.Get(1), "write": a.Get(2), "read": a.Get(3)}, nil)
				},
			},
			{
				Name: "add_vhost", Usage: "add a virtual host", ArgsUsage: "NAME", Flags: ctlFlags(),
				Action: func(cc *cli.Context) error {
					name, err := oneArg(cc)
					if err != nil {
						return err
					}
					return ctlDo(cc, "PUT", "/api/vhosts/"+url.PathEscape(name), nil, nil)
				},
			},
			{
				Name: "delete_vhost", Usage: "delete a virtual host and everything in it", ArgsUsage: "NAME", Flags: ctlFlags(),
				Action: func(cc *cli.Context) error { return ctlDelete(cc, "/api/vhosts/") },
			},
			declareQueueCommand(),
			{
				Name: "delete_queue", Usage: "delete a queue", ArgsUsage: "NAME",
				Flags: ctlFlags(vhostFlag, &cli.BoolFlag{Name: "if-empty"}, &cli.BoolFlag{Name: "if-unused"}),
				Action: func(cc *cli.Context) error {
					name, err := oneArg(cc)
					if err != nil {
						return err
					}
					q := url.Values{}
					if cc.Bool("if-empty") {
						q.Set("if-empty", "true")
					}
					if cc.Bool("if-unused") {
						q.Set("if-unused", "true")
					}
					p := queuePath(cc, name)
					if len(q) > 0 {
						p += "?" + q.Encode()
					}
					return ctlDo(cc, "DELETE", p, nil, nil)
				},
			},
			{
				Name: "purge_queue", Usage: "drop a queue's ready messages", ArgsUsage: "NAME", Flags: ctlFlags(vhostFlag),
				Action: func(cc *cli.Context) error {
					name, err := oneArg(cc)
					if err != nil {
						return err
					}
					return ctlDo(cc, "DELETE", queuePath(cc, name)+"/contents", nil, nil)
				},
			},
			{
				Name: "export_definitions", Usage: "write the broker's definitions (to FILE, or stdout)", ArgsUsage: "[FILE]", Flags: ctlFlags(),
				Action: func(cc *cli.Context) error {
					var defs json.RawMessage
					if err := ctlDo(cc, "GET", "/api/definitions", nil, &defs); err != nil {
						return err
					}
					var buf bytes.Buffer
					if err := json.Indent(&buf, defs, "", "  "); err != nil {
						return err
					}
					buf.WriteByte('\n')
					if f := cc.Args().First(); f != "" && f != "-" {
						return os.WriteFile(f, buf.Bytes(), 0o600)
					}
					_, err := cc.App.Writer.Write(buf.Bytes())
					return err
				},
			},
			{
				Name: "import_definitions", Usage: "import a definitions file (or stdin)", ArgsUsage: "[FILE]", Flags: ctlFlags(),
				Action: func(cc *cli.Context) error {
					data, source, err := readInput(cc, cc.Args().First())
					if err != nil {
						return err
					}
					var defs map[string]any
					if err := parseJSONArg(source, data, &defs); err != nil {
						return err
					}
					return ctlDo(cc, "POST", "/api/definitions", json.RawMessage(data), nil)
				},
			},
			{
				Name: "status", Usage: "show the broker's status", Flags: ctlFlags(),
				Action: func(cc *cli.Context) error {
					var o map[string]any
					if err := ctlDo(cc, "GET", "/api/overview", nil, &o); err != nil {
						return err
					}
					if format, err := ctlFormatter(cc); err != nil {
						return err
					} else if format == "json" {
						return printJSON(cc, o)
					}
					w := tabwriter.NewWriter(cc.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintf(w, "node\t%v\n", o["node"])
					fmt.Fprintf(w, "version\t%v\n", o["product_version"])
					for _, group := range []string{"object_totals", "queue_totals"} {
						m, _ := o[group].(map[string]any)
						keys := make([]string, 0, len(m))
						for k, v := range m {
							if _, isMap := v.(map[string]any); !isMap {
								keys = append(keys, k)
							}
						}
						sort.Strings(keys)
						for _, k := range keys {
							fmt.Fprintf(w, "%s\t%v\n", k, m[k])
						}
					}
					if ls, ok := o["listeners"].([]any); ok {
						for _, l := range ls {
							if lm, ok := l.(map[string]any); ok {
								fmt.Fprintf(w, "listener\t%v %v:%v\n", lm["protocol"], lm["ip_address"], lm["port"])
							}
						}
					}
					var nodes []map[string]any
					if err := ctlDo(cc, "GET", "/api/nodes", nil, &nodes); err != nil {
						return err
					}
					for _, n := range nodes {
						fmt.Fprintf(w, "memory alarm\t%v\n", n["mem_alarm"])
						fmt.Fprintf(w, "disk alarm\t%v\n", n["disk_free_alarm"])
					}
					return w.Flush()
				},
			},
		}, append(clusterCommands(), memberCommands()...)...),
	}
}

// setPolicyCommand is set_policy or set_operator_policy, as in
// rabbitmqctl: NAME PATTERN DEFINITION (a JSON object), with --priority
// and --apply-to.
func setPolicyCommand(name, base string) *cli.Command {
	return &cli.Command{
		Name: name, Usage: "set a policy", ArgsUsage: "NAME PATTERN DEFINITION",
		Flags: ctlFlags(vhostFlag,
			&cli.IntFlag{Name: "priority", Usage: "the policy's priority (highest applies)"},
			&cli.StringFlag{Name: "apply-to", Value: "all", Usage: "queues, exchanges or all"}),
		Action: func(cc *cli.Context) error {
			if cc.NArg() != 3 {
				return errors.New("want NAME PATTERN DEFINITION")
			}
			a := cc.Args()
			var def map[string]any
			if err := parseJSONArg("DEFINITION (a JSON object)", []byte(a.Get(2)), &def); err != nil {
				return err
			}
			applyTo := cc.String("apply-to")
			if base == "/api/operator-policies/" && !cc.IsSet("apply-to") {
				applyTo = "queues"
			}
			return ctlDo(cc, "PUT", base+url.PathEscape(cc.String("vhost"))+"/"+url.PathEscape(a.Get(0)), map[string]any{
				"pattern": a.Get(1), "definition": def, "priority": cc.Int("priority"), "apply-to": applyTo,
			}, nil)
		},
	}
}

// clearPolicyCommand is clear_policy or clear_operator_policy: NAME.
func clearPolicyCommand(name, base string) *cli.Command {
	return &cli.Command{
		Name: name, Usage: "delete a policy", ArgsUsage: "NAME", Flags: ctlFlags(vhostFlag),
		Action: func(cc *cli.Context) error {
			n, err := oneArg(cc)
			if err != nil {
				return err
			}
			return ctlDo(cc, "DELETE", base+url.PathEscape(cc.String("vhost"))+"/"+url.PathEscape(n), nil, nil)
		},
	}
}

func oneArg(cc *cli.Context) (string, error) {
	if cc.NArg() != 1 {
		return "", fmt.Errorf("want one argument: %s", cc.Command.ArgsUsage)
	}
	return cc.Args().First(), nil
}

func twoArgs(cc *cli.Context) (string, string, error) {
	if cc.NArg() != 2 {
		return "", "", fmt.Errorf("want two arguments: %s", cc.Command.ArgsUsage)
	}
	return cc.Args().Get(0), cc.Args().Get(1), nil
}

func queuePath(cc *cli.Context, name string) string {
	return "/api/queues/" + url.PathEscape(cc.String("vhost")) + "/" + url.PathEscape(name)
}

func ctlDelete(cc *cli.Context, prefix string) error {
	name, err := oneArg(cc)
	if err != nil {
		return err
	}
	return ctlDo(cc, "DELETE", prefix+url.PathEscape(name), nil, nil)
}
