package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"

	"github.com/urfave/cli/v2"
)

// listCommand is a list_* command: GET path (per vhost with --vhost when
// perVHost), derive adds the columns rabbitmqctl names that the API nests
// (queue_name of a consumer), cols are the default columns.
func listCommand(name, usage, path string, perVHost bool, derive func(map[string]any), cols ...string) *cli.Command {
	flags := ctlFlags()
	if perVHost {
		flags = ctlFlags(&cli.StringFlag{Name: "vhost", Aliases: []string{"p"}, Usage: "virtual host (default: all)"})
	}
	return &cli.Command{
		Name: name, Usage: usage, Flags: flags,
		ArgsUsage:   "[COLUMN...]",
		Description: "Columns by default: " + strings.Join(cols, " ") + ".\nAny field of the API's objects may be named, nested ones with dots (queue.name).",
		Action: func(cc *cli.Context) error {
			p := path
			if v := cc.String("vhost"); perVHost && v != "" {
				p += "/" + url.PathEscape(v)
			}
			var out []map[string]any
			if err := ctlDo(cc, "GET", p, nil, &out); err != nil {
				return err
			}
			if derive != nil {
				for _, it := range out {
					derive(it)
				}
			}
			picked, err := selectColumns(cc, out, cols)
			if err != nil {
				return err
			}
			return printList(cc, out, picked)
		},
	}
}

// channelColumns adds list_channels' connection column.
func channelColumns(it map[string]any) {
	if v, ok := lookup(it, "connection_details.name"); ok {
		it["connection"] = v
	}
}

// consumerColumns adds list_consumers' rabbitmqctl columns.
func consumerColumns(it map[string]any) {
	if v, ok := lookup(it, "queue.name"); ok {
		it["queue_name"] = v
	}
	if v, ok := lookup(it, "queue.vhost"); ok {
		it["vhost"] = v
	}
	if v, ok := lookup(it, "channel_details.name"); ok {
		it["channel"] = v
	}
	if v, ok := lookup(it, "channel_details.connection_name"); ok {
		it["connection"] = v
	}
}

// ctlUnknown is the action of "warren ctl" itself: with an argument, it
// is a command that does not exist.
func ctlUnknown(cc *cli.Context) error {
	if cc.NArg() == 0 {
		return cli.ShowSubcommandHelp(cc)
	}
	name := cc.Args().First()
	var names []string
	for _, c := range cc.Command.Subcommands {
		names = append(names, c.Name)
	}
	msg := fmt.Sprintf("unknown ctl command %q", name)
	if near := nearest(name, names); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return errors.New(msg + " (warren ctl --help lists the commands)")
}

// nearest returns the name closest to s by edit distance, when close.
func nearest(s string, names []string) string {
	best, bestD := "", len(s)/2+1
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// argumentsFlag is --arguments: a JSON object of x-arguments.
var argumentsFlag = &cli.StringFlag{Name: "arguments", Usage: `arguments as a JSON object, e.g. '{"x-max-length": 1000}'`}

// jsonArguments decodes --arguments; nil when it is not set.
func jsonArguments(cc *cli.Context) (map[string]any, error) {
	s := cc.String("arguments")
	if s == "" {
		return nil, nil
	}
	var args map[string]any
	if err := parseJSONArg("--arguments", []byte(s), &args); err != nil {
		return nil, err
	}
	return args, nil
}

func exchangePath(cc *cli.Context, name string) string {
	if name == "" {
		name = "amq.default"
	}
	return "/api/exchanges/" + url.PathEscape(cc.String("vhost")) + "/" + url.PathEscape(name)
}

func declareQueueCommand() *cli.Command {
	return &cli.Command{
		Name: "declare_queue", Usage: "declare a queue", ArgsUsage: "NAME",
		Flags: ctlFlags(vhostFlag,
			&cli.StringFlag{Name: "type", Value: "classic", Usage: "classic, quorum or stream"},
			&cli.BoolFlag{Name: "durable", Value: true, Usage: "survive a restart"},
			&cli.BoolFlag{Name: "auto-delete", Usage: "delete when the last consumer goes"},
			argumentsFlag),
		Action: func(cc *cli.Context) error {
			name, err := oneArg(cc)
			if err != nil {
				return err
			}
			args, err := jsonArguments(cc)
			if err != nil {
				return err
			}
			switch t := cc.String("type"); t {
			case "classic":
			case "quorum", "stream":
				if args == nil {
					args = map[string]any{}
				}
				args["x-queue-type"] = t
			default:
				return fmt.Errorf("--type %q: want classic, quorum or stream", t)
			}
			body := map[string]any{"durable": cc.Bool("durable"), "auto_delete": cc.Bool("auto-delete")}
			if args != nil {
				body["arguments"] = args
			}
			return ctlDo(cc, "PUT", queuePath(cc, name), body, nil)
		},
	}
}

func declareExchangeCommand() *cli.Command {
	return &cli.Command{
		Name: "declare_exchange", Usage: "declare an exchange", ArgsUsage: "NAME",
		Flags: ctlFlags(vhostFlag,
			&cli.StringFlag{Name: "type", Value: "direct", Usage: "direct, fanout, topic, headers or a plugin type"},
			&cli.BoolFlag{Name: "durable", Value: true, Usage: "survive a restart"},
			&cli.BoolFlag{Name: "auto-delete", Usage: "delete when the last binding goes"},
			&cli.BoolFlag{Name: "internal", Usage: "only other exchanges may publish to it"},
			argumentsFlag),
		Action: func(cc *cli.Context) error {
			name, err := oneArg(cc)
			if err != nil {
				return err
			}
			args, err := jsonArguments(cc)
			if err != nil {
				return err
			}
			body := map[string]any{"type": cc.String("type"), "durable": cc.Bool("durable"),
				"auto_delete": cc.Bool("auto-delete"), "internal": cc.Bool("internal")}
			if args != nil {
				body["arguments"] = args
			}
			return ctlDo(cc, "PUT", exchangePath(cc, name), body, nil)
		},
	}
}

func deleteExchangeCommand() *cli.Command {
	return &cli.Command{
		Name: "delete_exchange", Usage: "delete an exchange", ArgsUsage: "NAME",
		Flags: ctlFlags(vhostFlag, &cli.BoolFlag{Name: "if-unused", Usage: "only if it has no bindings"}),
		Action: func(cc *cli.Context) error {
			name, err := oneArg(cc)
			if err != nil {
				return err
			}
			p := exchangePath(cc, name)
			if cc.Bool("if-unused") {
				p += "?if-unused=true"
			}
			return ctlDo(cc, "DELETE", p, nil, nil)
		},
	}
}

var bindingFlags = []cli.Flag{
	vhostFlag,
	&cli.StringFlag{Name: "destination-type", Value: "queue", Usage: "queue or exchange"},
	&cli.StringFlag{Name: "routing-key", Usage: "binding key"},
	argumentsFlag,
}

// bindingPath is the API path of the bindings from SOURCE to DESTINATION.
func bindingPath(cc *cli.Context) (string, error) {
	src, dst, err := twoArgs(cc)
	if err != nil {
		return "", err
	}
	kind := "q"
	switch dt := cc.String("destination-type"); dt {
	case "queue":
	case "exchange":
		kind = "e"
	default:
		return "", fmt.Errorf("--destination-type %q: want queue or exchange", dt)
	}
	if src == "" {
		return "", errors.New("the default exchange takes no bindings")
	}
	return "/api/bindings/" + url.PathEscape(cc.String("vhost")) + "/e/" + url.PathEscape(src) + "/" + kind + "/" + url.PathEscape(dst), nil
}

func declareBindingCommand() *cli.Command {
	return &cli.Command{
		Name: "declare_binding", Usage: "bind a queue or exchange to an exchange", ArgsUsage: "SOURCE DESTINATION",
		Flags: ctlFlags(bindingFlags...),
		Action: func(cc *cli.Context) error {
			p, err := bindingPath(cc)
			if err != nil {
				return err
			}
			args, err := jsonArguments(cc)
			if err != nil {
				return err
			}
			body := map[string]any{"routing_key": cc.String("routing-key")}
			if args != nil {
				body["arguments"] = args
			}
			return ctlDo(cc, "POST", p, body, nil)
		},
	}
}

func deleteBindingCommand() *cli.Command {
	return &cli.Command{
		Name: "delete_binding", Usage: "remove a binding (matched by routing key and arguments)", ArgsUsage: "SOURCE DESTINATION",
		Flags: ctlFlags(bindingFlags...),
		Action: func(cc *cli.Context) error {
			p, err := bindingPath(cc)
			if err != nil {
				return err
			}
			args, err := jsonArguments(cc)
			if err != nil {
				return err
			}
			var bs []map[string]any
			if err := ctlDo(cc, "GET", p, nil, &bs); err != nil {
				return err
			}
			key := cc.String("routing-key")
			for _, b := range bs {
				ba, _ := b["arguments"].(map[string]any)
				if b["routing_key"] == key && sameArguments(ba, args) {
					props, _ := b["properties_key"].(string)
					return ctlDo(cc, "DELETE", p+"/"+url.PathEscape(props), nil, nil)
				}
			}
			src, dst := cc.Args().Get(0), cc.Args().Get(1)
			return fmt.Errorf("binding from exchange '%s' to %s '%s' with routing key '%s' not found in vhost '%s' (404)",
				src, cc.String("destination-type"), dst, key, cc.String("vhost"))
		},
	}
}

// sameArguments compares binding arguments, nil and empty being equal.
func sameArguments(a, b map[string]any) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// userRecord returns a user's password hash, hashing algorithm and tags.
func userRecord(cc *cli.Context, name string) (map[string]any, error) {
	var u map[string]any
	if err := ctlDo(cc, "GET", "/api/users/"+url.PathEscape(name), nil, &u); err != nil {
		return nil, err
	}
	return u, nil
}

func setUserTagsCommand() *cli.Command {
	return &cli.Command{
		Name: "set_user_tags", Usage: "replace a user's tags (none clears them)", ArgsUsage: "USER [TAG...]",
		Flags: ctlFlags(),
		Action: func(cc *cli.Context) error {
			if cc.NArg() < 1 {
				return errors.New("want USER [TAG...]")
			}
			name := cc.Args().First()
			u, err := userRecord(cc, name)
			if err != nil {
				return err
			}
			tags := cc.Args().Tail()
			if tags == nil {
				tags = []string{}
			}
			return ctlDo(cc, "PUT", "/api/users/"+url.PathEscape(name), map[string]any{
				"password_hash": u["password_hash"], "hashing_algorithm": u["hashing_algorithm"], "tags": tags,
			}, nil)
		},
	}
}

func changePasswordCommand() *cli.Command {
	return &cli.Command{
		Name: "change_password", Usage: "set a user's password, keeping the tags", ArgsUsage: "USER NEW_PASSWORD",
		Flags: ctlFlags(),
		Action: func(cc *cli.Context) error {
			name, pass, err := twoArgs(cc)
			if err != nil {
				return err
			}
			u, err := userRecord(cc, name)
			if err != nil {
				return err
			}
			tags := u["tags"]
			if tags == nil {
				tags = []string{}
			}
			return ctlDo(cc, "PUT", "/api/users/"+url.PathEscape(name), map[string]any{"password": pass, "tags": tags}, nil)
		},
	}
}

func closeConnectionCommand() *cli.Command {
	return &cli.Command{
		Name: "close_connection", Usage: "close a client connection (320 CONNECTION_FORCED with the reason)", ArgsUsage: "NAME [REASON]",
		Flags: ctlFlags(),
		Action: func(cc *cli.Context) error {
			if cc.NArg() < 1 || cc.NArg() > 2 {
				return errors.New("want NAME [REASON]")
			}
			name := cc.Args().First()
			reason := cc.Args().Get(1)
			if reason == "" {
				reason = "closed via warren ctl"
			}
			return ctlSend(cc, ctlRequest{
				method: "DELETE", path: "/api/connections/" + url.PathEscape(name),
				header: http.Header{"X-Reason": {reason}},
			})
		},
	}
}

func publishCommand() *cli.Command {
	return &cli.Command{
		Name: "publish", Usage: "publish a message through the API", ArgsUsage: "[PAYLOAD]",
		Description: "The payload is the argument, or stdin without one.",
		Flags: ctlFlags(vhostFlag,
			&cli.StringFlag{Name: "exchange", Aliases: []string{"e"}, Usage: "exchange (default: the default exchange)"},
			&cli.StringFlag{Name: "routing-key", Aliases: []string{"k"}, Usage: "routing key (with the default exchange: the queue)"},
			&cli.StringFlag{Name: "properties", Usage: `message properties as a JSON object, e.g. '{"delivery_mode": 2, "headers": {"a": 1}}'`},
			&cli.StringFlag{Name: "payload-encoding", Value: "string", Usage: "string or base64"}),
		Action: func(cc *cli.Context) error {
			var payload string
			switch cc.NArg() {
			case 0:
				data, _, err := readInput(cc, "")
				if err != nil {
					return err
				}
				payload = string(data)
			case 1:
				payload = cc.Args().First()
			default:
				return errors.New("want at most one argument: the payload")
			}
			props := map[string]any{}
			if s := cc.String("properties"); s != "" {
				if err := parseJSONArg("--properties", []byte(s), &props); err != nil {
					return err
				}
			}
			var res struct {
				Routed bool `json:"routed"`
			}
			err := ctlDo(cc, "POST", exchangePath(cc, cc.String("exchange"))+"/publish", map[string]any{
				"routing_key": cc.String("routing-key"), "payload": payload,
				"payload_encoding": cc.String("payload-encoding"), "properties": props,
			}, &res)
			if err != nil {
				return err
			}
			if format, err := ctlFormatter(cc); err != nil {
				return err
			} else if format == "json" {
				return printJSON(cc, res)
			}
			if res.Routed {
				fmt.Fprintln(cc.App.Writer, "Message published")
			} else {
				fmt.Fprintln(cc.App.Writer, "Message published but NOT routed")
			}
			return nil
		},
	}
}

func getCommand() *cli.Command {
	return &cli.Command{
		Name: "get", Usage: "get messages from a queue through the API", ArgsUsage: "QUEUE [COLUMN...]",
		Flags: ctlFlags(vhostFlag,
			&cli.IntFlag{Name: "count", Value: 1, Usage: "messages to get"},
			&cli.StringFlag{Name: "ackmode", Value: "ack_requeue_true", Usage: "ack_requeue_true, ack_requeue_false, reject_requeue_true or reject_requeue_false"},
			&cli.StringFlag{Name: "encoding", Value: "auto", Usage: "payload encoding: auto (string when valid UTF-8) or base64"},
			&cli.IntFlag{Name: "truncate", Value: -1, Usage: "show at most this many payload bytes (-1 = all)"}),
		Action: func(cc *cli.Context) error {
			if cc.NArg() < 1 {
				return errors.New("want QUEUE")
			}
			q := cc.Args().First()
			body := map[string]any{"count": cc.Int("count"), "ackmode": cc.String("ackmode"), "encoding": cc.String("encoding")}
			if n := cc.Int("truncate"); n >= 0 {
				body["truncate"] = n
			}
			var msgs []map[string]any
			if err := ctlDo(cc, "POST", queuePath(cc, q)+"/get", body, &msgs); err != nil {
				return err
			}
			cols := []string{"routing_key", "exchange", "message_count", "payload", "payload_bytes", "payload_encoding", "redelivered", "properties"}
			if extra := cc.Args().Tail(); len(extra) > 0 {
				cols = extra
			}
			format, err := ctlFormatter(cc)
			if err != nil {
				return err
			}
			if format == "json" {
				if msgs == nil {
					msgs = []map[string]any{}
				}
				return printJSON(cc, msgs)
			}
			if len(msgs) == 0 {
				fmt.Fprintf(cc.App.Writer, "queue '%s' is empty\n", q)
				return nil
			}
			return printList(cc, msgs, cols)
		},
	}
}
