package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/urfave/cli/v2"
)

// superStreamPath is the API path of super stream name.
func superStreamPath(cc *cli.Context, name string) string {
	return "/api/super-streams/" + url.PathEscape(cc.String("vhost")) + "/" + url.PathEscape(name)
}

// addSuperStreamCommand is rabbitmq-streams add_super_stream: NAME with
// --partitions N or --binding-keys a,b,c, and the partitions' retention.
func addSuperStreamCommand() *cli.Command {
	return &cli.Command{
		Name: "add_super_stream", Usage: "create a super stream (a direct exchange and its partition streams)", ArgsUsage: "NAME",
		Flags: ctlFlags(vhostFlag,
			&cli.IntFlag{Name: "partitions", Usage: "number of partitions (streams NAME-0..NAME-(N-1), keys 0..N-1)"},
			&cli.StringFlag{Name: "binding-keys", Usage: "comma-separated binding keys, one partition NAME-<key> each"},
			&cli.StringFlag{Name: "max-length-bytes", Usage: "partition retention by size, e.g. 20000000000"},
			&cli.StringFlag{Name: "max-age", Usage: "partition retention by age, e.g. 7D (units Y M D h m s)"},
			&cli.Int64Flag{Name: "stream-max-segment-size-bytes", Usage: "partition segment size"},
			&cli.BoolFlag{Name: "hash-routing", Usage: "route on the hash of the routing key (for AMQP 0-9-1 publishers)"}),
		Action: func(cc *cli.Context) error {
			name, err := oneArg(cc)
			if err != nil {
				return err
			}
			body := map[string]any{}
			switch n, keys := cc.Int("partitions"), cc.String("binding-keys"); {
			case n > 0 && keys != "":
				return errors.New("give --partitions or --binding-keys, not both")
			case n > 0:
				body["partitions"] = n
			case keys != "":
				body["binding_keys"] = strings.Split(keys, ",")
			default:
				return errors.New("give --partitions N or --binding-keys a,b,c")
			}
			args := map[string]any{}
			if v := cc.String("max-length-bytes"); v != "" {
				args["x-max-length-bytes"] = jsonNumber(v)
			}
			if v := cc.String("max-age"); v != "" {
				args["x-max-age"] = v
			}
			if v := cc.Int64("stream-max-segment-size-bytes"); v > 0 {
				args["x-stream-max-segment-size-bytes"] = v
			}
			if len(args) > 0 {
				body["arguments"] = args
			}
			if cc.Bool("hash-routing") {
				body["routing"] = "hash"
			}
			return ctlDo(cc, "PUT", superStreamPath(cc, name), body, nil)
		},
	}
}

// deleteSuperStreamCommand is rabbitmq-streams delete_super_stream.
func deleteSuperStreamCommand() *cli.Command {
	return &cli.Command{
		Name: "delete_super_stream", Usage: "delete a super stream and its partitions", ArgsUsage: "NAME", Flags: ctlFlags(vhostFlag),
		Action: func(cc *cli.Context) error {
			name, err := oneArg(cc)
			if err != nil {
				return err
			}
			return ctlDo(cc, "DELETE", superStreamPath(cc, name), nil, nil)
		},
	}
}

// jsonNumber passes a decimal integer through JSON as a number.
type jsonNumber string

func (n jsonNumber) MarshalJSON() ([]byte, error) {
	for _, c := range n {
		if c < '0' || c > '9' {
			return nil, errors.New("not a non-negative integer: " + string(n))
		}
	}
	return []byte(n), nil
}

// streamStatusCommand is rabbitmq-streams stream_status: a stream's
// offsets as the answering node's replica has them and, in a cluster, its
// leader and members.
func streamStatusCommand() *cli.Command {
	return &cli.Command{
		Name: "stream_status", Usage: "show a stream's leader, members and offsets", ArgsUsage: "NAME", Flags: ctlFlags(vhostFlag),
		Action: func(cc *cli.Context) error {
			name, err := oneArg(cc)
			if err != nil {
				return err
			}
			var q struct {
				Type    string   `json:"type"`
				Leader  string   `json:"leader"`
				Members []string `json:"members"`
				Online  []string `json:"online"`
				Stream  *struct {
					First     uint64  `json:"first_offset"`
					Next      uint64  `json:"next_offset"`
					Committed uint64  `json:"committed_offset"`
					Stored    *uint64 `json:"stored_offset"`
					Replicas  []struct {
						Node      string `json:"node"`
						Online    bool   `json:"online"`
						Committed uint64 `json:"committed_offset"`
						Stored    uint64 `json:"stored_offset"`
						Lag       uint64 `json:"lag"`
					} `json:"replicas"`
					Consumers []struct {
						Name   string `json:"name"`
						Offset uint64 `json:"offset"`
						Lag    uint64 `json:"lag"`
					} `json:"consumers"`
				} `json:"stream"`
			}
			path := "/api/queues/" + url.PathEscape(cc.String("vhost")) + "/" + url.PathEscape(name)
			if err := ctlDo(cc, "GET", path, nil, &q); err != nil {
				return err
			}
			if q.Type != "stream" || q.Stream == nil {
				return fmt.Errorf("%s is not a stream", name)
			}
			w := cc.App.Writer
			if q.Leader != "" {
				fmt.Fprintf(w, "leader\t%s\n", q.Leader)
			}
			if len(q.Members) > 0 {
				fmt.Fprintf(w, "members\t%s\nonline\t%s\n", strings.Join(q.Members, ","), strings.Join(q.Online, ","))
			}
			s := q.Stream
			fmt.Fprintf(w, "first_offset\t%d\nnext_offset\t%d\ncommitted_offset\t%d\n", s.First, s.Next, s.Committed)
			if s.Stored != nil {
				fmt.Fprintf(w, "stored_offset\t%d\n", *s.Stored)
			}
			for _, r := range s.Replicas {
				if !r.Online {
					fmt.Fprintf(w, "replica\t%s\tnot answering\n", r.Node)
					continue
				}
				fmt.Fprintf(w, "replica\t%s\tcommitted %d\tstored %d\tlag %d\n", r.Node, r.Committed, r.Stored, r.Lag)
			}
			for _, c := range s.Consumers {
				fmt.Fprintf(w, "consumer\t%s\toffset %d\tlag %d\n", c.Name, c.Offset, c.Lag)
			}
			return nil
		},
	}
}
