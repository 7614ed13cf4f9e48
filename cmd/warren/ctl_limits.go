package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"

	"github.com/urfave/cli/v2"
)

// User limits, as rabbitmqctl's set_user_limits, clear_user_limits and
// list_user_limits, over /api/user-limits.

func userLimitsPath(user string) string { return "/api/user-limits/" + url.PathEscape(user) }

// setUserLimitsCommand is set_user_limits USER DEFINITION: the limits
// given (a JSON object, e.g. {"max-connections": 10}) are set, the others
// kept.
func setUserLimitsCommand() *cli.Command {
	return &cli.Command{
		Name: "set_user_limits", Usage: "set a user's limits (max-connections, max-channels; negative = none)",
		ArgsUsage: "USER DEFINITION", Flags: ctlFlags(),
		Action: func(cc *cli.Context) error {
			user, def, err := twoArgs(cc)
			if err != nil {
				return err
			}
			var limits map[string]json.Number
			if err := parseJSONArg("DEFINITION (a JSON object of integers)", []byte(def), &limits); err != nil {
				return err
			}
			if len(limits) == 0 {
				return errors.New("DEFINITION sets no limit")
			}
			for _, name := range slices.Sorted(maps.Keys(limits)) {
				if err := ctlDo(cc, "PUT", userLimitsPath(user)+"/"+url.PathEscape(name),
					map[string]json.Number{"value": limits[name]}, nil); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// clearUserLimitsCommand is clear_user_limits USER NAME|all.
func clearUserLimitsCommand() *cli.Command {
	return &cli.Command{
		Name: "clear_user_limits", Usage: "clear a user's limit, or all of them", ArgsUsage: "USER NAME|all",
		Flags: ctlFlags(),
		Action: func(cc *cli.Context) error {
			user, name, err := twoArgs(cc)
			if err != nil {
				return err
			}
			names := []string{name}
			if name == "all" {
				var ls []struct {
					Value map[string]any `json:"value"`
				}
				if err := ctlDo(cc, "GET", userLimitsPath(user), nil, &ls); err != nil {
					return err
				}
				names = nil
				for _, l := range ls {
					names = append(names, slices.Sorted(maps.Keys(l.Value))...)
				}
			}
			for _, n := range names {
				if err := ctlDo(cc, "DELETE", userLimitsPath(user)+"/"+url.PathEscape(n), nil, nil); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// listUserLimitsCommand is list_user_limits: given a USER, that user's
// limits as a JSON object (as rabbitmqctl's list_user_limits --user USER
// prints them: ctl's --user is the user it logs in as); otherwise every
// user that has limits, as a table of user and limits (rabbitmqctl's
// --global).
func listUserLimitsCommand() *cli.Command {
	return &cli.Command{
		Name: "list_user_limits", Usage: "list users' limits", ArgsUsage: "[USER]",
		Flags: ctlFlags(&cli.BoolFlag{Name: "global", Usage: "every user's limits (the default without USER)"}),
		Action: func(cc *cli.Context) error {
			if cc.NArg() > 1 {
				return errors.New("want at most one argument: [USER]")
			}
			if u := cc.Args().First(); u != "" && !cc.Bool("global") {
				return printLimits(cc, userLimitsPath(u), "user", true)
			}
			return printLimits(cc, "/api/user-limits", "user", false)
		},
	}
}

// Vhost limits, as rabbitmqctl's set_vhost_limits, clear_vhost_limits and
// list_vhost_limits (-p VHOST), over /api/vhost-limits.

func vhostLimitsPath(vhost string) string { return "/api/vhost-limits/" + url.PathEscape(vhost) }

// setVHostLimitsCommand is set_vhost_limits [-p VHOST] DEFINITION: the
// limits given (e.g. {"max-connections": 10, "max-queues": 100}) are set,
// the others kept.
func setVHostLimitsCommand() *cli.Command {
	return &cli.Command{
		Name: "set_vhost_limits", Usage: "set a vhost's limits (max-connections, max-queues; negative = none)",
		ArgsUsage: "DEFINITION", Flags: ctlFlags(vhostFlag),
		Action: func(cc *cli.Context) error {
			if cc.NArg() != 1 {
				return errors.New("want one argument: DEFINITION")
			}
			var limits map[string]json.Number
			if err := parseJSONArg("DEFINITION (a JSON object of integers)", []byte(cc.Args().First()), &limits); err != nil {
				return err
			}
			if len(limits) == 0 {
				return errors.New("DEFINITION sets no limit")
			}
			for _, name := range slices.Sorted(maps.Keys(limits)) {
				if err := ctlDo(cc, "PUT", vhostLimitsPath(cc.String("vhost"))+"/"+url.PathEscape(name),
					map[string]json.Number{"value": limits[name]}, nil); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// clearVHostLimitsCommand is clear_vhost_limits [-p VHOST]: every limit of
// the vhost is cleared, as rabbitmqctl's.
func clearVHostLimitsCommand() *cli.Command {
	return &cli.Command{
		Name: "clear_vhost_limits", Usage: "clear a vhost's limits", Flags: ctlFlags(vhostFlag),
		Action: func(cc *cli.Context) error {
			if cc.NArg() != 0 {
				return errors.New("want no argument")
			}
			for _, n := range []string{"max-connections", "max-queues"} {
				if err := ctlDo(cc, "DELETE", vhostLimitsPath(cc.String("vhost"))+"/"+n, nil, nil); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// listVHostLimitsCommand is list_vhost_limits [-p VHOST] [--global]: the
// vhost's limits as a JSON object, or every vhost with limits as a table.
func listVHostLimitsCommand() *cli.Command {
	return &cli.Command{
		Name: "list_vhost_limits", Usage: "list vhosts' limits",
		Flags: ctlFlags(vhostFlag, &cli.BoolFlag{Name: "global", Usage: "every vhost's limits"}),
		Action: func(cc *cli.Context) error {
			if !cc.Bool("global") {
				return printLimits(cc, vhostLimitsPath(cc.String("vhost")), "vhost", true)
			}
			return printLimits(cc, "/api/vhost-limits", "vhost", false)
		},
	}
}

// printLimits prints the limits the API lists at path: with one, the
// limits of the (single) object listed as a JSON object, as rabbitmqctl
// prints one user's or vhost's; otherwise a table of each object (its
// key: user or vhost) and its limits.
func printLimits(cc *cli.Context, path, key string, one bool) error {
	var ls []map[string]any
	if err := ctlDo(cc, "GET", path, nil, &ls); err != nil {
		return err
	}
	if one {
		limits := map[string]any{}
		for _, l := range ls {
			if v, ok := l["value"].(map[string]any); ok {
				limits = v
			}
		}
		b, err := json.Marshal(limits)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(cc.App.Writer, "%s\n", b)
		return err
	}
	items := make([]map[string]any, len(ls))
	for i, l := range ls {
		items[i] = map[string]any{key: l[key], "limits": l["value"]}
	}
	return printList(cc, items, []string{key, "limits"})
}
