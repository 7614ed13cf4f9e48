package web

import (
	"cmp"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// item is one object of a list response, as JSON.
type item = map[string]any

// maxPageSize is RabbitMQ's limit on page_size.
const maxPageSize = 500

// listQuery is what a list request asks for: a name filter (substring,
// or regular expression with use_regex=true), a sort key (a dotted path,
// sort_reverse=true to reverse), columns (comma-separated dotted paths)
// and a page (when page is given; page_size 100 by default, at most
// maxPageSize).
type listQuery struct {
	match      func(string) bool
	sortKey    string
	reverse    bool
	columns    []string
	paged      bool
	page, size int
}

// parseListQuery reads r's list parameters, answering 400 for bad ones.
func parseListQuery(w http.ResponseWriter, r *http.Request) (listQuery, bool) {
	q := r.URL.Query()
	lq := listQuery{sortKey: q.Get("sort"), reverse: q.Get("sort_reverse") == "true", size: 100}
	if name := q.Get("name"); name != "" {
		if q.Get("use_regex") == "true" {
			re, err := regexp.Compile(name)
			if err != nil {
				badRequest(w, fmt.Sprintf("invalid regular expression: %v", err))
				return lq, false
			}
			lq.match = re.MatchString
		} else {
			lower := strings.ToLower(name)
			lq.match = func(s string) bool { return strings.Contains(strings.ToLower(s), lower) }
		}
	}
	if cols := q.Get("columns"); cols != "" {
		lq.columns = strings.Split(cols, ",")
	}
	if !q.Has("page") {
		return lq, true
	}
	lq.paged = true
	var err error
	lq.page, err = strconv.Atoi(q.Get("page"))
	if err != nil || lq.page < 1 {
		badRequest(w, "page must be a positive integer")
		return lq, false
	}
	if s := q.Get("page_size"); s != "" {
		lq.size, err = strconv.Atoi(s)
		if err != nil || lq.size < 1 {
			badRequest(w, "page_size must be a positive integer")
			return lq, false
		}
		if lq.size > maxPageSize {
			badRequest(w, fmt.Sprintf("page_size must be between 1 and %d", maxPageSize))
			return lq, false
		}
	}
	return lq, true
}

// bounds returns the [start, end) of the requested page among n filtered
// objects, or answers 400 for a page out of range.
func (lq *listQuery) bounds(w http.ResponseWriter, n int) (start, end int, ok bool) {
	if !lq.paged {
		return 0, n, true
	}
	if pageCount := (n + lq.size - 1) / lq.size; n > 0 && lq.page > pageCount {
		badRequest(w, fmt.Sprintf("page out of range: %d of %d", lq.page, pageCount))
		return 0, 0, false
	}
	start = min((lq.page-1)*lq.size, n)
	return start, min(start+lq.size, n), true
}

// write answers with items (the page, when paged, of filtered objects out
// of total), cut down to the requested columns.
func (lq *listQuery) write(w http.ResponseWriter, items []item, filtered, total int) {
	if lq.columns != nil {
		for i, it := range items {
			items[i] = project(it, lq.columns)
		}
	}
	if items == nil {
		items = []item{}
	}
	if !lq.paged {
		writeJSON(w, http.StatusOK, items)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"filtered_count": filtered,
		"item_count":     len(items),
		"items":          items,
		"page":           lq.page,
		"page_count":     (filtered + lq.size - 1) / lq.size,
		"page_size":      lq.size,
		"total_count":    total,
	})
}

// writeList answers a list request (listQuery) over items.
func writeList(w http.ResponseWriter, r *http.Request, items []item) {
	lq, ok := parseListQuery(w, r)
	if !ok {
		return
	}
	writeListItems(w, &lq, items)
}

func writeListItems(w http.ResponseWriter, lq *listQuery, items []item) {
	total := len(items)
	if lq.match != nil {
		items = slices.DeleteFunc(items, func(it item) bool {
			s, _ := it["name"].(string)
			return !lq.match(s)
		})
	}
	if lq.sortKey != "" {
		slices.SortStableFunc(items, func(a, b item) int { return compareAny(lookup(a, lq.sortKey), lookup(b, lq.sortKey)) })
	}
	if lq.reverse {
		slices.Reverse(items)
	}
	start, end, ok := lq.bounds(w, len(items))
	if !ok {
		return
	}
	lq.write(w, items[start:end], len(items), total)
}

// writeListOf answers a list request over objs without building the JSON
// of objects the answer leaves out: objects are filtered by name and
// sorted as they are, and only the page is turned into JSON. sorts maps
// the sort keys it can order objects by to their comparison (giving the
// order compareAny gives to their JSON values); another key falls back
// to building every object's JSON (writeList).
func writeListOf[T any](w http.ResponseWriter, r *http.Request, objs []T, name func(T) string,
	sorts map[string]func(a, b T) int, toJSON func(T) item) {
	lq, ok := parseListQuery(w, r)
	if !ok {
		return
	}
	byKey, sortable := sorts[lq.sortKey]
	if lq.sortKey != "" && !sortable {
		items := make([]item, len(objs))
		for i, o := range objs {
			items[i] = toJSON(o)
		}
		writeListItems(w, &lq, items)
		return
	}
	total := len(objs)
	if lq.match != nil {
		objs = slices.DeleteFunc(objs, func(o T) bool { return !lq.match(name(o)) })
	}
	if byKey != nil {
		slices.SortStableFunc(objs, byKey)
	}
	if lq.reverse {
		slices.Reverse(objs)
	}
	start, end, ok := lq.bounds(w, len(objs))
	if !ok {
		return
	}
	items := make([]item, 0, end-start)
	for _, o := range objs[start:end] {
		items = append(items, toJSON(o))
	}
	lq.write(w, items, len(objs), total)
}

// lookup follows a dotted path through nested maps.
func lookup(it item, path string) any {
	var cur any = it
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

// project keeps only the given dotted paths of it.
func project(it item, paths []string) item {
	out := item{}
	for _, p := range paths {
		v := lookup(it, p)
		if v == nil {
			continue
		}
		parts := strings.Split(p, ".")
		m := out
		for _, k := range parts[:len(parts)-1] {
			next, ok := m[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = v
	}
	return out
}

// compareAny orders values of a column: numbers numerically, strings
// lexically, missing values first.
func compareAny(a, b any) int {
	fa, aNum := number(a)
	fb, bNum := number(b)
	switch {
	case aNum && bNum:
		return cmp.Compare(fa, fb)
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	return cmp.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint16:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}
