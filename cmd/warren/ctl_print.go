package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

// ctlFormatter returns the output format of a ctl command: "table" or
// "json" (--formatter, or --json).
func ctlFormatter(cc *cli.Context) (string, error) {
	f := cc.String("formatter")
	if cc.Bool("json") {
		if cc.IsSet("formatter") && f != "json" {
			return "", fmt.Errorf("--json and --formatter %s disagree", f)
		}
		return "json", nil
	}
	switch f {
	case "table", "json":
		return f, nil
	}
	return "", fmt.Errorf("--formatter %q: want table or json", f)
}

func printJSON(cc *cli.Context, v any) error {
	enc := json.NewEncoder(cc.App.Writer)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// lookup returns the value of column col in it: a top-level field, or a
// nested one named with dots ("queue.name").
func lookup(it map[string]any, col string) (any, bool) {
	if v, ok := it[col]; ok {
		return v, true
	}
	var cur any = it
	for _, part := range strings.Split(col, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// selectColumns checks the columns asked for (the command's arguments, as
// in rabbitmqctl list_queues name messages) against the items; with none
// asked for it returns def. A column that no item has is an error that
// lists the ones there are.
func selectColumns(cc *cli.Context, items []map[string]any, def []string) ([]string, error) {
	cols := cc.Args().Slice()
	if len(cols) == 0 {
		return def, nil
	}
	if len(items) == 0 {
		return cols, nil
	}
	for _, c := range cols {
		found := false
		for _, it := range items {
			if _, ok := lookup(it, c); ok {
				found = true
				break
			}
		}
		if !found {
			keys := make([]string, 0, len(items[0]))
			for k := range items[0] {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return nil, fmt.Errorf("%s: unknown column %q; columns are: %s", cc.Command.Name, c, strings.Join(keys, " "))
		}
	}
	return cols, nil
}

// printList prints objects as a table of cols, or as JSON (only the cols
// asked for, when some were).
func printList(cc *cli.Context, items []map[string]any, cols []string) error {
	format, err := ctlFormatter(cc)
	if err != nil {
		return err
	}
	if format == "json" {
		if items == nil {
			items = []map[string]any{}
		}
		if cc.NArg() > 0 {
			picked := make([]map[string]any, len(items))
			for i, it := range items {
				picked[i] = make(map[string]any, len(cols))
				for _, c := range cols {
					picked[i][c], _ = lookup(it, c)
				}
			}
			items = picked
		}
		return printJSON(cc, items)
	}
	w := tabwriter.NewWriter(cc.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(cols, "\t"))
	for _, it := range items {
		cells := make([]string, len(cols))
		for i, c := range cols {
			v, _ := lookup(it, c)
			cells[i] = cell(v)
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	return w.Flush()
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = cell(e)
		}
		return strings.Join(parts, ",")
	case float64:
		return fmt.Sprintf("%.15g", x)
	case map[string]any:
		b, _ := json.Marshal(x)
		return string(b)
	}
	return fmt.Sprint(v)
}

// parseJSONArg decodes a JSON argument or file content into v; a syntax
// error names the source and the line and column where it is.
func parseJSONArg(source string, data []byte, v any) error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		// Offset counts the offending byte too.
		line, col := position(data, se.Offset-1)
		return fmt.Errorf("%s: line %d, column %d: %v", source, line, col, se)
	case errors.As(err, &te):
		line, col := position(data, te.Offset)
		return fmt.Errorf("%s: line %d, column %d: JSON %s where %s was expected", source, line, col, te.Value, te.Type)
	}
	return fmt.Errorf("%s: %v", source, err)
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, off int64) (line, col int) {
	if off < 0 {
		off = 0
	}
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	line, col = 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// readInput reads FILE, or stdin for "" or "-", and returns its name for
// messages.
func readInput(cc *cli.Context, file string) ([]byte, string, error) {
	if file != "" && file != "-" {
		data, err := os.ReadFile(file)
		return data, file, err
	}
	data, err := io.ReadAll(cc.App.Reader)
	return data, "<stdin>", err
}
