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

// writeList answers a list request: filtered by name (substring, or
// regular expression with use_regex=true), sorted by sort (a dotted
// path, sort_reverse=true to reverse), paginated when page is given, and
// cut down to columns (comma-separated dotted paths).
func writeList(w http.ResponseWriter, r *http.Request, items []item) {
	q := r.URL.Query()
	total := len(items)
	if name := q.Get("name"); name != "" {
		var match func(string) bool
		if q.Get("use_regex") == "true" {
			re, err := regexp.Compile(name)
			if err != nil {
				badRequest(w, fmt.Sprintf("invalid regular expression: %v", err))
				return
			}
			match = re.MatchString
		} else {
			lower := strings.ToLower(name)
			match = func(s string) bool { return strings.Contains(strings.ToLower(s), lower) }
		}
		items = slices.DeleteFunc(items, func(it item) bool {
			s, _ := it["name"].(string)
			return !match(s)
		})
	}
	if key := q.Get("sort"); key != "" {
		slices.SortStableFunc(items, func(a, b item) int { return compareAny(lookup(a, key), lookup(b, key)) })
	}
	if q.Get("sort_reverse") == "true" {
		slices.Reverse(items)
	}
	if cols := q.Get("columns"); cols != "" {
		paths := strings.Split(cols, ",")
		for i, it := range items {
			items[i] = project(it, paths)
		}
	}
	if items == nil {
		items = []item{}
	}
	if !q.Has("page") {
		writeJSON(w, http.StatusOK, items)
		return
	}
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil || page < 1 {
		badRequest(w, "page must be a positive integer")
		return
	}
	size := 100
	if s := q.Get("page_size"); s != "" {
		size, err = strconv.Atoi(s)
		if err != nil || size < 1 {
			badRequest(w, "page_size must be a positive integer")
			return
		}
		if size > maxPageSize {
			badRequest(w, fmt.Sprintf("page_size must be between 1 and %d", maxPageSize))
			return
		}
	}
	filtered := len(items)
	pageCount := (filtered + size - 1) / size
	if filtered > 0 && page > pageCount {
		badRequest(w, fmt.Sprintf("page out of range: %d of %d", page, pageCount))
		return
	}
	start := min((page-1)*size, filtered)
	end := min(start+size, filtered)
	writeJSON(w, http.StatusOK, map[string]any{
		"filtered_count": filtered,
		"item_count":     end - start,
		"items":          items[start:end],
		"page":           page,
		"page_count":     pageCount,
		"page_size":      size,
		"total_count":    total,
	})
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
